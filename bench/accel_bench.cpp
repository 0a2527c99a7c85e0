// The per-block codec costs of the gga pipeline (bench/run_gga.sh): LZ4 compress / decompress and
// 2+1 erasure-coding encode / decode of a B-byte logical block (each EC half is B/2 bytes), two
// ways side by side:
//   raw/...  liblz4 and ISA-L called directly: LZ4_compress_default / LZ4_decompress_safe on one
//            B-byte block (for B <= 64 KiB the image's LZ4 frame holds exactly that one block,
//            level 1 = acceleration 1), ec_encode_data over two B/2 halves with one output row;
//   zc/...   zcstore's src/accel engines (lz4_engine, ec_engine, dma_engine), a task allocated,
//            submitted and completed through a progress engine, as the gga service runs them.
// Data: the compressible text zcstore_local gga (and bench/run_gga.sh) stores, "block storage line
// N of the gga pipeline\n" with N = i * 7919 % 10007, cut into blocks; the benchmarks cycle over
// 256 consecutive blocks of it (2-4 MiB, like a service walking the storage). *_zeros: zero blocks,
// what the initiator's write_throughput_test writes (its memory is never filled).
//
//   zc_accel_bench [Google Benchmark flags] [--sizes 8192,16384]
//
// *_random: random blocks, which do not compress: format v2 stores them raw after the LZ4 attempt
// (the compressor runs to the end and the image does not fit). crc32c: the checksum format v2 keeps
// per block and checks on every read (raw: ISA-L crc32_iscsi; zc: core::crc32c).
// Every benchmark reports per-block time (real and cpu); the label holds the compressed size.
#include <benchmark/benchmark.h>
#include <isa-l/crc.h>
#include <isa-l/erasure_code.h>
#include <lz4.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "accel/dma_engine.hpp"
#include "accel/ec_engine.hpp"
#include "accel/lz4_engine.hpp"
#include "common.hpp"
#include "core/buffer.hpp"
#include "core/crc32c.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"

namespace {

using namespace zc;

constexpr size_t block_count = 256;

using bench::die;

// What a block_set's blocks hold.
enum class content { text, zeros, random };

// The plain file zcstore_local gga makes (apps/local/gga_launcher.cpp, compressible_text).
std::vector<uint8_t> compressible_text(size_t size) {
  std::string text;
  text.reserve(size + 64);
  char line[96];
  for (uint64_t i = 0; text.size() < size; ++i) {
    const int n = std::snprintf(line, sizeof(line), "block storage line %llu of the gga pipeline\n",
                                static_cast<unsigned long long>(i * 7919 % 10007));
    text.append(line, static_cast<size_t>(n));
  }
  text.resize(size);
  return {text.begin(), text.end()};
}

// Random bytes (a fixed seed: every run measures the same blocks); LZ4 finds nothing to compress.
std::vector<uint8_t> random_bytes(size_t size) {
  std::mt19937_64 rng(0x67676121);
  std::vector<uint8_t> out(size);
  for (size_t i = 0; i < size; i += sizeof(uint64_t)) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, std::min(sizeof v, size - i));
  }
  return out;
}

// Memory the zcstore engines can address: one memory map, buffers handed out from it.
class arena {
 public:
  explicit arena(size_t size) : memory_(size), inventory_(4 * block_count + 16) {
    map_ = core::memory_map::wrap(memory_.data(), memory_.size(), core::access::local_read_write);
  }
  uint8_t* take(size_t n) {
    if (used_ + n > memory_.size()) die("arena too small");
    uint8_t* p = memory_.data() + used_;
    used_ += (n + 63) & ~size_t(63);
    return p;
  }
  // A buffer whose data section is [p, p + n).
  core::buffer& with_data(uint8_t* p, size_t n) {
    core::buffer* b = nullptr;
    if (!ok(inventory_.get_by_data(*map_, p, n, b))) die("buffer");
    return *b;
  }
  // An empty buffer with n bytes of tail room at p.
  core::buffer& empty(uint8_t* p, size_t n) {
    core::buffer* b = nullptr;
    if (!ok(inventory_.get_by_addr(*map_, p, n, b))) die("buffer");
    return *b;
  }

 private:
  std::vector<uint8_t> memory_;
  std::unique_ptr<core::memory_map> map_;
  core::buffer_inventory inventory_;
  size_t used_ = 0;
};

// One block size's data: the plain blocks, their LZ4 blocks (raw) and their images (zcstore's),
// the EC halves of the images and their parity.
struct block_set {
  size_t size;
  arena mem;
  std::vector<uint8_t*> plain, image, parity;
  std::vector<std::vector<char>> lz4_blocks;
  size_t compressed_total = 0;

  explicit block_set(size_t b, content what) : size(b), mem(4 * block_count * b + 1024) {
    const auto text = what == content::zeros    ? std::vector<uint8_t>(block_count * b, 0)
                      : what == content::random ? random_bytes(block_count * b)
                                                : compressible_text(block_count * b);
    std::vector<char> scratch(static_cast<size_t>(LZ4_compressBound(int(b))));
    for (size_t i = 0; i < block_count; ++i) {
      plain.push_back(mem.take(b));
      std::memcpy(plain.back(), text.data() + i * b, b);
      const int c = LZ4_compress_default(reinterpret_cast<const char*>(plain.back()),
                                         scratch.data(), int(b), int(scratch.size()));
      if (c <= 0) die("LZ4_compress_default failed");
      lz4_blocks.emplace_back(scratch.begin(), scratch.begin() + c);
      compressed_total += size_t(c);
    }
  }
  size_t half() const { return size / 2; }
};

std::vector<size_t> sizes{8192, 16384};

// ISA-L tables for P = a*D1 + b*D2 of the vandermonde matrix, and the row that rebuilds D1 from
// D2 and P, built as the ec_engine builds them.
struct isal_tables {
  std::array<uint8_t, 32 * 2> encode{}, decode{};
  isal_tables() {
    uint8_t m[3 * 2];
    gf_gen_rs_matrix(m, 3, 2);
    ec_init_tables(2, 1, m + 4, encode.data());
    // Survivors D2 (row 1) and P (row 2) -> D1: invert their rows, take the row of D1.
    uint8_t survivors[4] = {m[2], m[3], m[4], m[5]}, inverse[4];
    if (gf_invert_matrix(survivors, inverse, 2) != 0) die("singular matrix");
    ec_init_tables(2, 1, inverse, decode.data());
  }
};

// ---- raw: liblz4 and ISA-L directly

void raw_lz4_compress(benchmark::State& state, content what) {
  block_set set(size_t(state.range(0)), what);
  std::vector<char> out(size_t(LZ4_compressBound(int(set.size))));
  size_t i = 0;
  for (auto _ : state) {
    const int c = LZ4_compress_default(reinterpret_cast<const char*>(set.plain[i]), out.data(),
                                       int(set.size), int(out.size()));
    benchmark::DoNotOptimize(c);
    i = (i + 1) % block_count;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(set.size));
  state.SetLabel("compressed " + std::to_string(set.compressed_total / block_count) + " B");
}

void raw_lz4_decompress(benchmark::State& state) {
  block_set set(size_t(state.range(0)), content::text);
  std::vector<char> out(set.size);
  size_t i = 0;
  for (auto _ : state) {
    const auto& in = set.lz4_blocks[i];
    const int n = LZ4_decompress_safe(in.data(), out.data(), int(in.size()), int(out.size()));
    if (n != int(set.size)) die("LZ4_decompress_safe failed");
    benchmark::ClobberMemory();
    i = (i + 1) % block_count;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(set.size));
}

// Encode: P from the two halves of a block. Decode: D1 from D2 and P (the same kernel, another
// table; the recovery read's work).
void raw_ec(benchmark::State& state, bool decode) {
  block_set set(size_t(state.range(0)), content::text);
  const isal_tables t;
  const int h = int(set.half());
  std::vector<uint8_t> out(set.half()), parity(set.half());
  size_t i = 0;
  for (auto _ : state) {
    uint8_t* src[2] = {set.plain[i], set.plain[i] + h};
    if (decode) src[0] = parity.data();
    uint8_t* dst[1] = {out.data()};
    ec_encode_data(h, 2, 1, const_cast<uint8_t*>(decode ? t.decode.data() : t.encode.data()), src,
                   dst);
    benchmark::ClobberMemory();
    i = (i + 1) % block_count;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(set.size));
}

void raw_memcpy(benchmark::State& state) {
  block_set set(size_t(state.range(0)), content::text);
  std::vector<uint8_t> out(set.size);
  size_t i = 0;
  for (auto _ : state) {
    std::memcpy(out.data(), set.plain[i], set.size);
    benchmark::ClobberMemory();
    i = (i + 1) % block_count;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(set.size));
}

// The checksum of one plain block: ISA-L's crc32_iscsi, as core::crc32c calls it.
void raw_crc32c(benchmark::State& state) {
  block_set set(size_t(state.range(0)), content::text);
  size_t i = 0;
  for (auto _ : state) {
    const uint32_t crc = ~crc32_iscsi(set.plain[i], int(set.size), 0xFFFFFFFFu);
    benchmark::DoNotOptimize(crc);
    i = (i + 1) % block_count;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(set.size));
}

// ---- zc: the src/accel engines, one task at a time through a progress engine

struct engines {
  core::progress_engine pe{core::poll_mode::busy};
  uint64_t done = 0, failed = 0;
  // A compress that finds the block incompressible (too_big) counts as done: the v2 service then
  // stores the block raw.
  bool too_big_is_done = false;
  accel::lz4_engine lz4;
  accel::ec_engine ec;
  accel::dma_engine dma;

  explicit engines(size_t max_block)
      : lz4(pe,
            {.compress_tasks = 1,
             .decompress_tasks = 1,
             .max_block_size = max_block,
             .on_compress_done = [this](accel::lz4_compress_task& t) { finish(t, true); },
             .on_compress_error =
                 [this](accel::lz4_compress_task& t) {
                   finish(t, too_big_is_done && t.result() == status::too_big);
                 },
             .on_decompress_done = [this](accel::lz4_decompress_task& t) { finish(t, true); },
             .on_decompress_error = [this](accel::lz4_decompress_task& t) { finish(t, false); }}),
        ec(pe, {.create_tasks = 1,
                .recover_tasks = 1,
                .on_create_done = [this](accel::ec_create_task& t) { finish(t, true); },
                .on_create_error = [this](accel::ec_create_task& t) { finish(t, false); },
                .on_recover_done = [this](accel::ec_recover_task& t) { finish(t, true); },
                .on_recover_error = [this](accel::ec_recover_task& t) { finish(t, false); }}),
        dma(pe, {.memcpy_tasks = 1,
                 .on_memcpy_done = [this](accel::dma_memcpy_task& t) { finish(t, true); },
                 .on_memcpy_error = [this](accel::dma_memcpy_task& t) { finish(t, false); }}) {
    if (lz4.start() != status::success || ec.start() != status::success ||
        dma.start() != status::success)
      die("engine start");
  }
  ~engines() {
    lz4.stop();
    ec.stop();
    dma.stop();
    pe.progress();
  }
  void finish(core::task_base& t, bool success) {
    ++(success ? done : failed);
    t.free();
  }
  // Submits the task and runs the engine until it completed; dies on a failure.
  template <typename Engine, typename Task>
  void run(Engine& e, Task* t) {
    if (t == nullptr || e.submit(*t) != status::success) die("submit");
    const uint64_t before = done;
    while (done == before && failed == 0) pe.progress();
    if (failed != 0) die("an engine task failed");
  }
};

// Empties a destination buffer for the next task.
void reset(core::buffer& b) {
  if (b.set_data(b.head(), 0) != status::success) die("set_data");
}

// The plain blocks as buffers, whole (or their first `n` bytes at `offset`).
std::vector<core::buffer*> plain_buffers(block_set& set, size_t offset, size_t n) {
  std::vector<core::buffer*> out;
  for (auto* p : set.plain) out.push_back(&set.mem.with_data(p + offset, n));
  return out;
}

// One engine task per iteration, block after block: make(i) allocates the task of block i, which
// appends to `out` (emptied before each).
template <typename Engine, typename Make>
void engine_loop(benchmark::State& state, const block_set& set, engines& e, Engine& engine,
                 core::buffer& out, Make make) {
  size_t i = 0;
  for (auto _ : state) {
    reset(out);
    e.run(engine, make(i));
    i = (i + 1) % block_count;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(set.size));
}

void zc_lz4_compress(benchmark::State& state, content what) {
  block_set set(size_t(state.range(0)), what);
  engines e(set.size);
  e.too_big_is_done = what == content::random;
  const auto src = plain_buffers(set, 0, set.size);
  core::buffer& dst = set.mem.empty(set.mem.take(set.size), set.size);
  engine_loop(state, set, e, e.lz4, dst,
              [&](size_t i) { return e.lz4.allocate_compress(*src[i], dst); });
}

void zc_lz4_decompress(benchmark::State& state) {
  block_set set(size_t(state.range(0)), content::text);
  engines e(set.size);
  // The images, made by the engine itself.
  std::vector<core::buffer*> images;
  for (core::buffer* plain : plain_buffers(set, 0, set.size)) {
    core::buffer& image = set.mem.empty(set.mem.take(set.size), set.size);
    e.run(e.lz4, e.lz4.allocate_compress(*plain, image));
    images.push_back(&image);
  }
  core::buffer& out = set.mem.empty(set.mem.take(set.size), set.size);
  engine_loop(state, set, e, e.lz4, out,
              [&](size_t i) { return e.lz4.allocate_decompress(*images[i], out); });
}

// Encode: P from D1 and D2. Decode: D1 from D2 and P (the first half stands in for P: the same
// work).
void zc_ec(benchmark::State& state, bool decode) {
  block_set set(size_t(state.range(0)), content::text);
  engines e(set.size);
  const size_t h = set.half();
  const auto first = plain_buffers(set, 0, h), second = plain_buffers(set, h, h);
  core::buffer& out = set.mem.empty(set.mem.take(h), h);
  if (decode)
    engine_loop(state, set, e, e.ec, out, [&](size_t i) {
      return e.ec.allocate_recover(accel::ec_matrix::vandermonde, 0, *second[i], *first[i], out);
    });
  else
    engine_loop(state, set, e, e.ec, out, [&](size_t i) {
      return e.ec.allocate_create(accel::ec_matrix::vandermonde, *first[i], *second[i], out);
    });
}

void zc_memcpy(benchmark::State& state) {
  block_set set(size_t(state.range(0)), content::text);
  engines e(set.size);
  const auto src = plain_buffers(set, 0, set.size);
  core::buffer& dst = set.mem.empty(set.mem.take(set.size), set.size);
  engine_loop(state, set, e, e.dma, dst,
              [&](size_t i) { return e.dma.allocate_memcpy(*src[i], dst); });
}

void zc_crc32c(benchmark::State& state) {
  block_set set(size_t(state.range(0)), content::text);
  size_t i = 0;
  for (auto _ : state) {
    const uint32_t crc = core::crc32c({set.plain[i], set.size});
    benchmark::DoNotOptimize(crc);
    i = (i + 1) % block_count;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(set.size));
}

void register_all() {
  auto reg = [](const char* name, auto fn) {
    auto* b = benchmark::RegisterBenchmark(name, fn);
    for (size_t s : sizes) b->Arg(int64_t(s));
    b->Unit(benchmark::kNanosecond);
  };
  reg("raw/lz4_compress", [](benchmark::State& s) { raw_lz4_compress(s, content::text); });
  reg("raw/lz4_compress_zeros", [](benchmark::State& s) { raw_lz4_compress(s, content::zeros); });
  reg("raw/lz4_compress_random", [](benchmark::State& s) { raw_lz4_compress(s, content::random); });
  reg("raw/lz4_decompress", raw_lz4_decompress);
  reg("raw/ec_encode", [](benchmark::State& s) { raw_ec(s, false); });
  reg("raw/ec_decode", [](benchmark::State& s) { raw_ec(s, true); });
  reg("raw/memcpy", raw_memcpy);
  reg("raw/crc32c", raw_crc32c);
  reg("zc/lz4_compress", [](benchmark::State& s) { zc_lz4_compress(s, content::text); });
  reg("zc/lz4_compress_zeros", [](benchmark::State& s) { zc_lz4_compress(s, content::zeros); });
  reg("zc/lz4_compress_random", [](benchmark::State& s) { zc_lz4_compress(s, content::random); });
  reg("zc/lz4_decompress", zc_lz4_decompress);
  reg("zc/ec_encode", [](benchmark::State& s) { zc_ec(s, false); });
  reg("zc/ec_decode", [](benchmark::State& s) { zc_ec(s, true); });
  reg("zc/dma_memcpy", zc_memcpy);
  reg("zc/crc32c", zc_crc32c);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--sizes" && i + 1 < argc) {
      sizes = bench::parse_sizes(argv[++i]);
      for (size_t v : sizes)
        if (v < 64 || v > 65536 || v % 64 != 0) die("--sizes takes multiples of 64 up to 65536");
    } else {
      die("unknown argument " + a);
    }
  }
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
