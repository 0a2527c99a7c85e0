#include "initiator_config.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <thread>
#include <utility>

#include "core/cli.hpp"
#include "core/device.hpp"
#include "core/status.hpp"

namespace zc::initiator {
namespace {

constexpr std::array<std::pair<execution_strategy, std::string_view>, 4> strategy_names{{
    {execution_strategy::read_throughput_test, "read_throughput_test"},
    {execution_strategy::write_throughput_test, "write_throughput_test"},
    {execution_strategy::read_only_data_validity_test, "read_only_data_validity_test"},
    {execution_strategy::read_write_data_validity_test, "read_write_data_validity_test"},
}};

}  // namespace

std::string_view to_string(execution_strategy strategy) noexcept {
  for (const auto& [s, name] : strategy_names)
    if (s == strategy) return name;
  return "unknown";
}

std::optional<execution_strategy> strategy_from_string(std::string_view name) noexcept {
  for (const auto& [s, n] : strategy_names)
    if (n == name) return s;
  return std::nullopt;
}

execution_strategy initiator_config::strategy() const {
  auto s = strategy_from_string(execution_strategy_name);
  if (!s)
    throw status_error(status::invalid_value,
                       fmt::format("{} is unknown", execution_strategy_name));
  return *s;
}

std::optional<int> parse_config(int argc, const char* const* argv, initiator_config& out) {
  core::cli cli(program_name, "Storage load generator and validator (host side, over comch)");
  auto& app = cli.app();
  out.progress = ::isatty(STDERR_FILENO) == 1;
  // CLI11 wraps "-1" around to the largest unsigned value: negative numbers are refused first.
  app.add_option("-d,--device", out.device, "Network device: auto, tcp, sm, interface, RDMA device")
      ->capture_default_str();
  app.add_option("--cpu", out.cpus, "Core for one worker thread (repeat for more workers)")
      ->required()
      ->check(
          CLI::Range(0u, std::max(1u, std::thread::hardware_concurrency()) - 1, "an existing cpu"));
  app.add_option("--storage-plain-content", out.storage_plain_content,
                 "File with the expected plain contents of the storage (validity tests)");
  app.add_option("--execution-strategy", out.execution_strategy_name,
                 "read_throughput_test | write_throughput_test | read_only_data_validity_test | "
                 "read_write_data_validity_test")
      ->required();
  app.add_option("--run-limit-operation-count", out.run_limit_operation_count,
                 "Transactions per worker thread before it stops")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--transaction-count", out.transaction_count,
                 "Most concurrent transactions per worker")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--command-channel-name", out.command_channel_name,
                 "Comch server name to connect to")
      ->capture_default_str();
  app.add_option("--control-timeout", out.control_timeout_seconds,
                 "Seconds to wait for each control step (an IO waits twice this)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--keep-alive-timeout", out.keep_alive_seconds,
                 "Seconds the service may leave keep-alives unanswered before the session ends; "
                 "0: send none")
      ->check(CLI::NonNegativeNumber)
      ->check(core::off_or_at_least(storage::min_keep_alive_seconds))
      ->capture_default_str();
  app.add_option("--local-io-region-size", out.local_io_region_size,
                 "Bytes of local IO memory (0: the storage capacity; partial blocks are ignored)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--blocks-per-io", out.blocks_per_io, "Storage blocks moved by each IO (1..65535)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--stats-json", out.stats_json, "Also write the run's statistics to FILE as JSON");
  app.add_flag("--progress,!--no-progress", out.progress,
               "Print IOPS and MB/s once a second on stderr (default: when stderr is a terminal)");
  if (auto code = cli.parse(argc, argv)) return code;
  out.poll_mode = cli.polling();
  if (auto code = cli.check_device(out.device)) return code;
  if (auto errors = validate(out); !errors.empty()) {
    for (const auto& error : errors) std::cerr << program_name << ": " << error << "\n";
    std::cerr << program_name << ": " << invalid_config_message << "\n";
    return core::exit_bad_usage;
  }
  return std::nullopt;
}

std::vector<std::string> validate(const initiator_config& config) {
  std::vector<std::string> errors;
  if (config.transaction_count == 0) errors.emplace_back("transaction-count must not be zero");
  if (config.control_timeout_seconds == 0) errors.emplace_back("control-timeout must not be zero");
  // The reference accepted 0 (a division by zero later) and truncated values above 16 bits.
  if (config.blocks_per_io == 0 || config.blocks_per_io > max_blocks_per_io)
    errors.push_back(fmt::format("blocks-per-io must be between 1 and {}", max_blocks_per_io));
  auto strategy = strategy_from_string(config.execution_strategy_name);
  if (!strategy) {
    errors.push_back(fmt::format("{} is unknown", config.execution_strategy_name));
    return errors;
  }
  if (*strategy == execution_strategy::read_only_data_validity_test &&
      config.storage_plain_content.empty())
    errors.emplace_back("read_only_data_validity_test requires plain data file to be provided");
  // The reference required this of the throughput tests only; a validity test with no
  // transactions "passed" without checking anything.
  if (config.run_limit_operation_count == 0)
    errors.push_back(fmt::format("{} requires run-limit-operation-count to be greater than 0",
                                 config.execution_strategy_name));
  return errors;
}

std::string format_config(const initiator_config& config) {
  std::string cpus;
  for (auto c : config.cpus) cpus += fmt::format("{}{}", cpus.empty() ? "" : ", ", c);
  std::string out = "configuration: {\n";
  out += fmt::format("\tcpus: [{}]\n", cpus);
  out += fmt::format("\texecution_strategy: \"{}\"\n", config.execution_strategy_name);
  out += fmt::format("\tdevice: \"{}\"\n", config.device);
  out += fmt::format("\tcommand_channel_name: \"{}\"\n", config.command_channel_name);
  out += fmt::format("\tstorage_plain_content: \"{}\"\n", config.storage_plain_content);
  out += fmt::format("\ttransaction_count: {}\n", config.transaction_count);
  out += fmt::format("\trun_limit_operation_count: {}\n", config.run_limit_operation_count);
  out += fmt::format("\tcontrol_timeout: {}\n", config.control_timeout_seconds);
  out += fmt::format("\tblocks_per_io: {}\n", config.blocks_per_io);
  out += fmt::format("\tlocal_io_region_size: {}\n", config.local_io_region_size);
  out += "}\n";
  return out;
}

void print_config(const initiator_config& config) {
  std::fputs(format_config(config).c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace zc::initiator
