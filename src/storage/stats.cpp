#include "storage/stats.hpp"

#include <fmt/format.h>

#include <iterator>

namespace zc::storage {

std::string format_pe_hit_rate(uint64_t hits, uint64_t misses) {
  const double polls = static_cast<double>(hits) + static_cast<double>(misses);
  const double pct = polls > 0 ? static_cast<double>(hits) / polls * 100.0 : 0.0;
  return fmt::format("{:2.3f}% ({}:{})", pct, hits, misses);
}

std::string format_core_stats(const core_stats& stats) {
  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{}\n| Core: {}\n| Operation count: {}\n", stats_rule, stats.core_id,
                 stats.operation_count);
  if (stats.recovery_count) fmt::format_to(it, "| Recovery count: {}\n", *stats.recovery_count);
  if (stats.rebuild_count) fmt::format_to(it, "| Degraded rebuilds: {}\n", *stats.rebuild_count);
  if (const auto& i = stats.integrity)
    fmt::format_to(it,
                   "| Verified reads: {}\n| Repaired slots: {}\n| Unrecoverable reads: {}\n| Raw "
                   "writes: {}\n| Degraded writes: {}\n",
                   i->verified, i->repaired, i->unrecoverable, i->raw_writes, i->degraded_writes);
  fmt::format_to(it, "| PE hit rate: {}\n", format_pe_hit_rate(stats.pe_hits, stats.pe_misses));
  return out;
}

std::string format_core_stats(std::span<const core_stats> stats) {
  std::string out;
  for (const auto& core : stats) out += format_core_stats(core);
  return out;
}

std::string format_initiator_stats(const initiator_stats& s) {
  const double ops = static_cast<double>(s.operation_count);
  const double duration = s.duration_seconds;
  const double gib = ops * static_cast<double>(s.io_size) / double(uint64_t(1) << 30);
  const double data_rate = duration > 0 ? gib / duration : 0.0;
  const double io_rate = duration > 0 ? ops / 1e6 / duration : 0.0;
  const uint64_t mean = s.operation_count ? s.latency_total_us / s.operation_count : 0;

  std::string out;
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{0}\n| Stats\n{0}\n", stats_rule);
  fmt::format_to(it, "| Duration (seconds): {:2.6f}\n", duration);
  fmt::format_to(it, "| Operation count: {}\n", s.operation_count);
  fmt::format_to(it, "| Data rate: {:.3f} GiB/s\n", data_rate);
  fmt::format_to(it, "| IO rate: {:.3f} MIOP/s\n", io_rate);
  fmt::format_to(it, "| PE hit rate: {}\n", format_pe_hit_rate(s.pe_hits, s.pe_misses));
  fmt::format_to(it, "| Latency:\n");
  fmt::format_to(it, "| \tMin: {}us\n", s.latency_min_us);
  fmt::format_to(it, "| \tMax: {}us\n", s.latency_max_us);
  fmt::format_to(it, "| \tMean: {}us\n", mean);
  fmt::format_to(it, "{}\n", stats_rule);
  return out;
}

std::string format_test_failed() {
  return fmt::format("{0}\n| Test failed!!\n{0}\n", stats_rule);
}

}  // namespace zc::storage
