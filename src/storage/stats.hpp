// The statistics blocks the programs print at exit, with the reference's exact text
// (REFERENCE_SPEC §3.8), as strings so tests can compare them. Pure functions; any thread.
//
//   std::fputs(format_core_stats(per_core).c_str(), stdout);   // target and services
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace zc::storage {

// The frame line of every block.
inline constexpr std::string_view stats_rule = "+================================================+";

// "95.000% (19:1)": hits / (hits + misses) x 100 as %2.03lf, then the counts. No polls at all
// prints 0.000% where the reference printed "-nan%".
std::string format_pe_hit_rate(uint64_t hits, uint64_t misses);

// One worker of a target or service.
// What the gga service's image format v2 checks (zcstore; FORMATS.md §4.3).
struct block_integrity {
  uint64_t verified = 0;         // block reads whose checksum matched
  uint64_t repaired = 0;         // slots rewritten after a read found them bad
  uint64_t unrecoverable = 0;    // block reads failed: no pair of slots matched the checksum
  uint64_t raw_writes = 0;       // blocks stored raw
  uint64_t degraded_writes = 0;  // blocks written to two targets, the third being lost
};

struct core_stats {
  uint32_t core_id = 0;
  uint64_t operation_count = 0;
  std::optional<uint64_t> recovery_count;  // gga service only
  uint64_t pe_hits = 0;
  uint64_t pe_misses = 0;
  std::optional<block_integrity> integrity;  // gga service, format v2 only
  // gga service: halves rebuilt through EC for a lost target or a bad slot (the recovery count
  // is only the reads the trigger asked for, as the reference counts them).
  std::optional<uint64_t> rebuild_count;
};

// rule, "| Core: <id>", "| Operation count: <n>", ["| Recovery count: <n>"],
// ["| Degraded rebuilds: <n>"], [the
// block_integrity lines: "| Verified reads: <n>", "| Repaired slots: <n>",
// "| Unrecoverable reads: <n>", "| Raw writes: <n>", "| Degraded writes: <n>"],
// "| PE hit rate: ...".
std::string format_core_stats(const core_stats& stats);
// Every core's block, one after the other (what the target and services print after shutdown).
std::string format_core_stats(std::span<const core_stats> stats);

// Raw figures of an initiator run; the rates and the mean are computed here, as the reference
// does (ops x io_size / 2^30 / duration, ops / 10^6 / duration, total latency / ops).
struct initiator_stats {
  double duration_seconds = 0;
  uint64_t operation_count = 0;
  uint64_t io_size = 0;  // bytes per operation (Be)
  uint64_t pe_hits = 0;
  uint64_t pe_misses = 0;
  uint32_t latency_min_us = 0;
  uint32_t latency_max_us = 0;
  uint64_t latency_total_us = 0;
};

// The "| Stats" block of a successful initiator run (stdout).
std::string format_initiator_stats(const initiator_stats& stats);
// The block a failed run prints instead (to stderr): rule, "| Test failed!!", rule.
std::string format_test_failed();

}  // namespace zc::storage
