// zcstore_initiator_comch's configuration: the reference's flags (REFERENCE_SPEC §1.1) plus
// --json, --poll-mode, --stats-json and --progress, and the checks made before anything starts.
// Control path only; not thread-safe.
//
//   zc::initiator::initiator_config config;
//   if (auto code = zc::initiator::parse_config(argc, argv, config)) return *code;
//   zc::initiator::print_config(config);
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/progress_engine.hpp"
#include "storage/keep_alive.hpp"

namespace zc::initiator {

inline constexpr const char* program_name = "zcstore_initiator_comch";

// The reference's last validation line, printed after the individual errors.
inline constexpr std::string_view invalid_config_message =
    "Invalid initiator_comch_app_configuration detected";

// The IO message's blocks-per-io field is 16 bits wide; the reference truncated larger values.
inline constexpr uint64_t max_blocks_per_io = 65535;

enum class execution_strategy {
  read_throughput_test,
  write_throughput_test,
  read_only_data_validity_test,
  read_write_data_validity_test,
};

// The reference's names ("read_throughput_test", ...).
std::string_view to_string(execution_strategy strategy) noexcept;
std::optional<execution_strategy> strategy_from_string(std::string_view name) noexcept;
inline bool is_validity_test(execution_strategy s) noexcept {
  return s == execution_strategy::read_only_data_validity_test ||
         s == execution_strategy::read_write_data_validity_test;
}

struct initiator_config {
  std::string device = "auto";
  std::vector<uint32_t> cpus;  // one worker per entry, pinned to that core
  std::string storage_plain_content;
  std::string execution_strategy_name;             // as given; see strategy()
  uint64_t run_limit_operation_count = 1'000'000;  // per worker
  uint32_t transaction_count = 64;                 // most transactions in flight per worker
  std::string command_channel_name = "doca_storage_comch";
  uint32_t control_timeout_seconds = 5;
  // The service is lost once it answered no keep-alive for this long (0: none are sent).
  uint32_t keep_alive_seconds = storage::default_keep_alive_seconds;
  uint64_t local_io_region_size = 0;  // bytes; 0: the storage capacity
  uint64_t blocks_per_io = 1;         // k; 1..max_blocks_per_io once validated
  core::poll_mode poll_mode = core::poll_mode::adaptive;
  std::string stats_json;  // write the run's statistics there as JSON (empty: don't)
  bool progress = false;   // one progress line a second on stderr; default: stderr is a terminal

  std::chrono::seconds keep_alive_timeout() const {
    return std::chrono::seconds(keep_alive_seconds);
  }
  std::chrono::seconds control_timeout() const {
    return std::chrono::seconds(control_timeout_seconds);
  }
  // The strategy named by execution_strategy_name; only valid after validate() found no error.
  execution_strategy strategy() const;
};

// Parses argv (and the -j/--json file under it) and validates the result. Returns an exit status
// when the program must stop now: 0 after -h/-v; core::exit_bad_usage (2) after a bad command
// line (one line on stderr) or a configuration that validate() refuses (each error on its own
// line on stderr, then invalid_config_message). nullopt: go on with `out`.
std::optional<int> parse_config(int argc, const char* const* argv, initiator_config& out);

// Every problem with the configuration, in the reference's words where it had them (§1.1), plus
// the checks of the reference's defects (§8.2): blocks-per-io 0 or above 65535, and a run limit
// of 0 in every mode. Empty when the configuration can be used.
std::vector<std::string> validate(const initiator_config& config);

// The configuration as the reference prints it, plus blocks_per_io and local_io_region_size,
// which the reference left out.
std::string format_config(const initiator_config& config);
void print_config(const initiator_config& config);

}  // namespace zc::initiator
