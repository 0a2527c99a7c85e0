#include "common.hpp"

#include <errno.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

namespace zc::bench {
namespace fs = std::filesystem;

void die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::vector<size_t> parse_sizes(const std::string& text) {
  std::vector<size_t> out;
  for (const auto& word : split_list(text)) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(word.c_str(), &end, 10);
    if (end == word.c_str() || *end != '\0') die("not a number: " + word);
    out.push_back(static_cast<size_t>(v));
  }
  return out;
}

core::poll_mode parse_poll(const std::string& text) {
  if (text == "busy") return core::poll_mode::busy;
  if (text == "event") return core::poll_mode::event;
  if (text == "adaptive") return core::poll_mode::adaptive;
  die("--poll busy|event|adaptive");
}

const char* poll_name(core::poll_mode mode) noexcept {
  return mode == core::poll_mode::busy    ? "busy"
         : mode == core::poll_mode::event ? "event"
                                          : "adaptive";
}

void parse_pair_options(int argc, char** argv, const char* usage, pair_options& out,
                        const extra_option& extra) {
  if (argc < 4) {
    std::fprintf(stderr, usage, argv[0]);
    std::exit(2);
  }
  out.role = argv[1];
  out.dir = argv[2];
  out.device = argv[3];
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--cpu") {
      out.cpu = std::stoi(v);
    } else if (k == "--seconds") {
      out.seconds = std::stod(v);
    } else if (k == "--sizes") {
      out.sizes = parse_sizes(v);
    } else if (k == "--qd") {
      out.qd = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--window") {
      out.window = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--tests") {
      out.tests = split_list(v);
    } else if (!extra || !extra(k, v)) {
      std::fprintf(stderr, "%s: unknown option %s\n", program_invocation_short_name, k.c_str());
      std::exit(2);
    }
  }
}

bool wanted(const std::vector<std::string>& tests, std::string_view test) {
  return std::find(tests.begin(), tests.end(), test) != tests.end();
}

void write_blob(const fs::path& path, const std::vector<uint8_t>& bytes) {
  auto tmp = path;
  tmp += ".tmp";
  std::ofstream(tmp, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  fs::rename(tmp, path);
}

std::vector<uint8_t> wait_blob(const fs::path& path, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!fs::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline) die("timed out waiting for " + path.string());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void blob_reader::need(size_t n) const {
  if (n > in_.size() - at_) die("truncated exchange file");
}

std::vector<uint8_t> blob_reader::bytes() {
  const uint32_t n = get<uint32_t>();
  need(n);
  std::vector<uint8_t> out(in_.begin() + static_cast<std::ptrdiff_t>(at_),
                           in_.begin() + static_cast<std::ptrdiff_t>(at_ + n));
  at_ += n;
  return out;
}

namespace {

template <typename T>
latency_stats summarize(std::vector<T>& v) {
  latency_stats out;
  if (v.empty()) return out;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    return static_cast<double>(
        v[std::min(v.size() - 1, static_cast<size_t>(q * double(v.size())))]);
  };
  out.n = v.size();
  out.median_us = at(0.5) / 1e3;
  out.p99_us = at(0.99) / 1e3;
  out.p999_us = at(0.999) / 1e3;
  out.max_us = static_cast<double>(v.back()) / 1e3;
  double total = 0;
  for (T x : v) total += static_cast<double>(x);
  out.mean_us = total / double(v.size()) / 1e3;
  return out;
}

}  // namespace

latency_stats summarize_ns(std::vector<uint32_t>& samples) {
  return summarize(samples);
}
latency_stats summarize_ns(std::vector<uint64_t>& samples) {
  return summarize(samples);
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace zc::bench
