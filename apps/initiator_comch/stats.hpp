// An initiator run's statistics: per-worker counters kept on the data path without allocation or
// locks, merged after the workers stop into the figures the reference prints (REFERENCE_SPEC §3.8)
// plus latency percentiles, as text, as JSON (--stats-json) and as a one-line progress report.
//
//   worker_stats& mine = stats[worker];           // one per worker, owned by its thread
//   mine.record_transaction(finish - start);      // data path
//   auto summary = summarize(stats, plan.io_size());   // after every worker has stopped
//   std::fputs(format_run_stats(summary).c_str(), stdout);
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>

namespace zc::initiator {

// Latency samples in fixed log-linear buckets (HDR-like): values below 2^sub_bucket_bits are
// exact, larger ones fall in one of 2^sub_bucket_bits buckets per power of two, so a reported
// percentile is at most 1/32 (3.1 %) above the true sample. Fixed size (9 KiB), no allocation.
class latency_histogram {
 public:
  static constexpr unsigned sub_bucket_bits = 5;
  // Samples at or above 2^max_value_bits (ns: about 18 minutes) count in the last bucket.
  static constexpr unsigned max_value_bits = 40;
  static constexpr std::size_t bucket_count =
      (std::size_t(1) << sub_bucket_bits) * (max_value_bits - sub_bucket_bits + 1);

  void record(uint64_t value) noexcept;
  void merge(const latency_histogram& other) noexcept;
  uint64_t count() const noexcept { return total_; }
  // The smallest bucket upper edge at or below which a fraction q (0 < q <= 1) of the samples
  // lie; 0 when empty.
  uint64_t value_at_quantile(double q) const noexcept;

  static std::size_t bucket_of(uint64_t value) noexcept;
  static uint64_t bucket_upper_edge(std::size_t bucket) noexcept;

 private:
  std::array<uint64_t, bucket_count> counts_{};
  uint64_t total_ = 0;
};

// One worker's counters. Owned and written by its worker thread only; read after it stopped.
struct worker_stats {
  using clock = std::chrono::steady_clock;

  uint64_t operation_count = 0;
  uint64_t latency_min_ns = UINT64_MAX;
  uint64_t latency_max_ns = 0;
  uint64_t latency_sum_ns = 0;
  latency_histogram latency;
  uint64_t pe_hits = 0;            // polls that completed something
  uint64_t pe_misses = 0;          // polls that found nothing
  clock::time_point start_time{};  // just before the data path was started
  clock::time_point end_time{};    // when the worker's last transaction finished

  // A finished transaction, first step to last. No allocation.
  void record_transaction(std::chrono::nanoseconds latency) noexcept;
  // Adds another worker's counters: sums, min of minima and of start times, max of maxima and of
  // end times (an unset start time is ignored).
  void merge(const worker_stats& other) noexcept;
};

// The figures of a whole run, as printed and as written to JSON. Latencies in microseconds.
struct run_summary {
  double duration_seconds = 0;  // latest end time - start time
  uint64_t operation_count = 0;
  uint64_t io_size = 0;  // Be, bytes per operation
  uint64_t pe_hits = 0;
  uint64_t pe_misses = 0;
  uint32_t latency_min_us = 0;
  uint32_t latency_max_us = 0;
  uint32_t latency_mean_us = 0;
  uint32_t latency_p50_us = 0;
  uint32_t latency_p99_us = 0;
  uint32_t latency_p999_us = 0;

  double data_rate_gib_per_second() const noexcept;  // ops x io_size / 2^30 / duration
  double io_rate_miops() const noexcept;             // ops / 10^6 / duration
  bool operator==(const run_summary&) const = default;
};

// Merges every worker's counters into the run's figures.
run_summary summarize(std::span<const worker_stats> workers, uint64_t io_size);

// The reference's "| Stats" block, byte for byte, with "| \tp50: …us", "| \tp99: …us" and
// "| \tp99.9: …us" after the Mean line. For stdout.
std::string format_run_stats(const run_summary& summary);
// What a failed run prints instead, to stderr: rule, "| Test failed!!", rule.
std::string format_run_failed();

// For --stats-json: the raw figures plus the derived rates, same numbers as the text block.
nlohmann::json to_json(const run_summary& summary);
// Reads the raw figures back (the derived ones are recomputed). Throws nlohmann::json::exception
// on a missing or mistyped field.
run_summary run_summary_from_json(const nlohmann::json& json);

// A point of the run for --progress: seconds since start and operations completed so far.
struct progress_sample {
  double elapsed_seconds = 0;
  uint64_t operation_count = 0;
};
// "[    2.0s] IOPS 123456 MB/s 505.7 ops 246912": the rates between two samples (MB = 10^6 bytes),
// no newline.
std::string format_progress(const progress_sample& previous, const progress_sample& now,
                            uint64_t io_size);

}  // namespace zc::initiator
