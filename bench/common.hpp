// What the benchmark programs (bench/*_bench.cpp) share: fatal errors, comma lists on the command
// line, blobs exchanged between the two processes of a benchmark through files in a folder, and
// latency statistics over samples in nanoseconds. Not thread-safe; for benchmarks only.
//
//   zc::bench::write_blob(dir / "server.mem", bytes);                  // server
//   auto bytes = zc::bench::wait_blob(dir / "server.mem", std::chrono::seconds(30));  // client
//   auto stats = zc::bench::summarize_ns(samples);  // sorts; median, p99, p99.9, mean, max in µs
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/progress_engine.hpp"

namespace zc::bench {

// Prints "PROGRAM: what" on stderr and exits 1.
[[noreturn]] void die(const std::string& what);

// "a,b,c" -> {"a", "b", "c"}; empty items are dropped.
std::vector<std::string> split_list(const std::string& text);
// "4096,65536" -> {4096, 65536}; dies on a word that is not a number.
std::vector<size_t> parse_sizes(const std::string& text);
// busy | event | adaptive; dies on anything else.
core::poll_mode parse_poll(const std::string& text);
const char* poll_name(core::poll_mode mode) noexcept;

// The command line of the two-process benchmarks (rdma_bench, ucx_raw_bench):
//   PROGRAM server|client DIR DEVICE [--key value]...
// with the flags both take parsed here (--cpu --seconds --sizes --qd --window --tests) and any
// other handed to the program's `extra`, which returns false for one it does not know either.
struct pair_options {
  std::string role, dir, device;
  int cpu = -1;
  double seconds = 2.0;
  std::vector<size_t> sizes{4096, 65536};
  uint32_t qd = 32;
  uint32_t window = 64;
  std::vector<std::string> tests;  // as given; the program keeps its default when not
};
using extra_option = std::function<bool(const std::string& key, const std::string& value)>;
// Fills `out` (its fields' defaults stay for flags not given). Exits 2 printing `usage` (a
// printf format with one %s, the program) when ROLE DIR DEVICE are missing, and on an unknown flag.
void parse_pair_options(int argc, char** argv, const char* usage, pair_options& out,
                        const extra_option& extra);
// Whether a test is in the list.
bool wanted(const std::vector<std::string>& tests, std::string_view test);

// ---- blobs through files: written to a temporary name, then renamed, so a reader never sees
// half a blob.
void write_blob(const std::filesystem::path& path, const std::vector<uint8_t>& bytes);
// Waits for the file (polling every 2 ms) and returns its bytes; dies after `timeout`.
std::vector<uint8_t> wait_blob(const std::filesystem::path& path, std::chrono::seconds timeout);

// Appends fixed-size values (host byte order: both processes run on this machine) and
// length-prefixed byte strings.
class blob_writer {
 public:
  void u32(uint32_t v) { raw(&v, sizeof(v)); }
  void u64(uint64_t v) { raw(&v, sizeof(v)); }
  void bytes(const void* p, size_t n) {
    u32(static_cast<uint32_t>(n));
    raw(p, n);
  }
  const std::vector<uint8_t>& data() const noexcept { return out_; }

 private:
  void raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<uint8_t> out_;
};

// Reads what a blob_writer wrote; dies on a truncated blob.
class blob_reader {
 public:
  explicit blob_reader(const std::vector<uint8_t>& in) : in_(in) {}
  template <typename T>
  T get() {
    T v{};
    need(sizeof(T));
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::vector<uint8_t> bytes();

 private:
  void need(size_t n) const;
  const std::vector<uint8_t>& in_;
  size_t at_ = 0;
};

// ---- statistics

// Latency figures in microseconds over nanosecond samples. A percentile q is the sample at
// index min(n - 1, floor(q * n)) of the sorted samples.
struct latency_stats {
  size_t n = 0;
  double median_us = 0, p99_us = 0, p999_us = 0, mean_us = 0, max_us = 0;
};
// Sorts the samples; all zero when there are none.
latency_stats summarize_ns(std::vector<uint32_t>& samples);
latency_stats summarize_ns(std::vector<uint64_t>& samples);
// The middle value (the upper one of an even count); 0 for none.
double median(std::vector<double> values);

}  // namespace zc::bench
