#include "stats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "storage/stats.hpp"

namespace zc::initiator {
namespace {

constexpr uint64_t sub_buckets = uint64_t(1) << latency_histogram::sub_bucket_bits;
constexpr uint64_t largest_value = (uint64_t(1) << latency_histogram::max_value_bits) - 1;
constexpr uint64_t ns_per_us = 1000;

uint32_t clamp_us(uint64_t ns) {
  return static_cast<uint32_t>(std::min<uint64_t>(ns / ns_per_us, UINT32_MAX));
}

}  // namespace

std::size_t latency_histogram::bucket_of(uint64_t value) noexcept {
  value = std::min(value, largest_value);
  if (value < sub_buckets) return static_cast<std::size_t>(value);
  const unsigned exponent = static_cast<unsigned>(std::bit_width(value)) - 1;
  const unsigned shift = exponent - sub_bucket_bits;
  const uint64_t sub = (value >> shift) - sub_buckets;
  return static_cast<std::size_t>(sub_buckets + uint64_t(shift) * sub_buckets + sub);
}

uint64_t latency_histogram::bucket_upper_edge(std::size_t bucket) noexcept {
  if (bucket < sub_buckets) return bucket;
  const uint64_t shift = (bucket - sub_buckets) / sub_buckets;
  const uint64_t sub = (bucket - sub_buckets) % sub_buckets;
  const uint64_t lower = (sub_buckets + sub) << shift;
  return lower + (uint64_t(1) << shift) - 1;
}

void latency_histogram::record(uint64_t value) noexcept {
  ++counts_[bucket_of(value)];
  ++total_;
}

void latency_histogram::merge(const latency_histogram& other) noexcept {
  for (std::size_t i = 0; i < bucket_count; ++i) counts_[i] += other.counts_[i];
  total_ += other.total_;
}

uint64_t latency_histogram::value_at_quantile(double q) const noexcept {
  if (total_ == 0) return 0;
  const double wanted = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(total_));
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(wanted));
  uint64_t seen = 0;
  for (std::size_t i = 0; i < bucket_count; ++i) {
    seen += counts_[i];
    if (seen >= rank) return bucket_upper_edge(i);
  }
  return bucket_upper_edge(bucket_count - 1);
}

void worker_stats::record_transaction(std::chrono::nanoseconds latency) noexcept {
  const uint64_t ns = static_cast<uint64_t>(std::max<int64_t>(0, latency.count()));
  ++operation_count;
  latency_min_ns = std::min(latency_min_ns, ns);
  latency_max_ns = std::max(latency_max_ns, ns);
  latency_sum_ns += ns;
  this->latency.record(ns);
}

void worker_stats::merge(const worker_stats& other) noexcept {
  operation_count += other.operation_count;
  latency_min_ns = std::min(latency_min_ns, other.latency_min_ns);
  latency_max_ns = std::max(latency_max_ns, other.latency_max_ns);
  latency_sum_ns += other.latency_sum_ns;
  latency.merge(other.latency);
  pe_hits += other.pe_hits;
  pe_misses += other.pe_misses;
  if (start_time == clock::time_point{} ||
      (other.start_time != clock::time_point{} && other.start_time < start_time))
    start_time = other.start_time;
  end_time = std::max(end_time, other.end_time);
}

double run_summary::data_rate_gib_per_second() const noexcept {
  if (duration_seconds <= 0) return 0;
  const double gib = static_cast<double>(operation_count) * static_cast<double>(io_size) /
                     static_cast<double>(uint64_t(1) << 30);
  return gib / duration_seconds;
}

double run_summary::io_rate_miops() const noexcept {
  if (duration_seconds <= 0) return 0;
  return static_cast<double>(operation_count) / 1e6 / duration_seconds;
}

run_summary summarize(std::span<const worker_stats> workers, uint64_t io_size) {
  worker_stats all;
  for (const auto& w : workers) all.merge(w);
  run_summary s;
  if (all.start_time != worker_stats::clock::time_point{} && all.end_time > all.start_time)
    s.duration_seconds = std::chrono::duration<double>(all.end_time - all.start_time).count();
  s.operation_count = all.operation_count;
  s.io_size = io_size;
  s.pe_hits = all.pe_hits;
  s.pe_misses = all.pe_misses;
  if (all.operation_count == 0) return s;
  s.latency_min_us = clamp_us(all.latency_min_ns);
  s.latency_max_us = clamp_us(all.latency_max_ns);
  s.latency_mean_us = clamp_us(all.latency_sum_ns / all.operation_count);
  // A bucket's upper edge may lie beyond every sample: never report more than the maximum.
  auto percentile = [&](double q) {
    const uint64_t ns =
        std::clamp(all.latency.value_at_quantile(q), all.latency_min_ns, all.latency_max_ns);
    return clamp_us(ns);
  };
  s.latency_p50_us = percentile(0.50);
  s.latency_p99_us = percentile(0.99);
  s.latency_p999_us = percentile(0.999);
  return s;
}

std::string format_run_stats(const run_summary& s) {
  storage::initiator_stats figures;
  figures.duration_seconds = s.duration_seconds;
  figures.operation_count = s.operation_count;
  figures.io_size = s.io_size;
  figures.pe_hits = s.pe_hits;
  figures.pe_misses = s.pe_misses;
  figures.latency_min_us = s.latency_min_us;
  figures.latency_max_us = s.latency_max_us;
  // The shared formatter divides the total by the count; this total gives back the exact mean.
  figures.latency_total_us = uint64_t(s.latency_mean_us) * s.operation_count;
  std::string block = storage::format_initiator_stats(figures);
  // The percentiles go inside the block, after Mean, in front of the closing rule.
  const std::string closing = std::string(storage::stats_rule) + "\n";
  block.resize(block.size() - closing.size());
  block += fmt::format("| \tp50: {}us\n", s.latency_p50_us);
  block += fmt::format("| \tp99: {}us\n", s.latency_p99_us);
  block += fmt::format("| \tp99.9: {}us\n", s.latency_p999_us);
  block += closing;
  return block;
}

std::string format_run_failed() {
  return storage::format_test_failed();
}

nlohmann::json to_json(const run_summary& s) {
  const double polls = static_cast<double>(s.pe_hits) + static_cast<double>(s.pe_misses);
  return nlohmann::json{
      {"duration_seconds", s.duration_seconds},
      {"operation_count", s.operation_count},
      {"io_size", s.io_size},
      {"data_rate_gib_per_second", s.data_rate_gib_per_second()},
      {"io_rate_miops", s.io_rate_miops()},
      {"pe_hits", s.pe_hits},
      {"pe_misses", s.pe_misses},
      {"pe_hit_rate_percent", polls > 0 ? static_cast<double>(s.pe_hits) / polls * 100.0 : 0.0},
      {"latency_us",
       {{"min", s.latency_min_us},
        {"max", s.latency_max_us},
        {"mean", s.latency_mean_us},
        {"p50", s.latency_p50_us},
        {"p99", s.latency_p99_us},
        {"p99.9", s.latency_p999_us}}},
  };
}

run_summary run_summary_from_json(const nlohmann::json& json) {
  run_summary s;
  s.duration_seconds = json.at("duration_seconds").get<double>();
  s.operation_count = json.at("operation_count").get<uint64_t>();
  s.io_size = json.at("io_size").get<uint64_t>();
  s.pe_hits = json.at("pe_hits").get<uint64_t>();
  s.pe_misses = json.at("pe_misses").get<uint64_t>();
  const auto& latency = json.at("latency_us");
  s.latency_min_us = latency.at("min").get<uint32_t>();
  s.latency_max_us = latency.at("max").get<uint32_t>();
  s.latency_mean_us = latency.at("mean").get<uint32_t>();
  s.latency_p50_us = latency.at("p50").get<uint32_t>();
  s.latency_p99_us = latency.at("p99").get<uint32_t>();
  s.latency_p999_us = latency.at("p99.9").get<uint32_t>();
  return s;
}

std::string format_progress(const progress_sample& previous, const progress_sample& now,
                            uint64_t io_size) {
  const double interval = now.elapsed_seconds - previous.elapsed_seconds;
  const double ops = now.operation_count >= previous.operation_count
                         ? static_cast<double>(now.operation_count - previous.operation_count)
                         : 0.0;
  const double iops = interval > 0 ? ops / interval : 0.0;
  const double mb_per_second = iops * static_cast<double>(io_size) / 1e6;
  return fmt::format("[{:7.1f}s] IOPS {:.0f} MB/s {:.1f} ops {}", now.elapsed_seconds, iops,
                     mb_per_second, now.operation_count);
}

}  // namespace zc::initiator
