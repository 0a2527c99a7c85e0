// Runs a libFuzzer harness without libFuzzer: every file of the seed corpus folder given as
// argv[1], then deterministic mutations of each (truncations, byte flips, length-field
// corruption). A crash or sanitizer report fails the CTest run; anything else passes.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::vector<std::vector<uint8_t>> seeds;
  if (argc > 1 && std::filesystem::is_directory(argv[1])) {
    for (const auto& entry : std::filesystem::directory_iterator(argv[1])) {
      std::ifstream in(entry.path(), std::ios::binary);
      seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  seeds.push_back({});
  std::mt19937 rng(12345);
  size_t runs = 0;
  for (const auto& seed : seeds) {
    LLVMFuzzerTestOneInput(seed.data(), seed.size());
    for (size_t cut = 0; cut < seed.size(); ++cut) LLVMFuzzerTestOneInput(seed.data(), cut);
    for (int round = 0; round < 2000; ++round) {
      std::vector<uint8_t> m = seed;
      if (m.empty()) m.resize(1 + rng() % 64);
      for (int flips = 1 + rng() % 4; flips > 0; --flips) m[rng() % m.size()] = uint8_t(rng());
      LLVMFuzzerTestOneInput(m.data(), m.size());
      runs++;
    }
  }
  std::printf("replayed %zu seeds and %zu mutations\n", seeds.size(), runs);
  return 0;
}
