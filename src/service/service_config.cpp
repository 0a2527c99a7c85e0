#include "service/service_config.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <thread>

#include "core/status.hpp"
#include "storage/comch_session_server.hpp"
#include "storage/ipv4_endpoint.hpp"
#include "storage/keep_alive.hpp"

namespace zc::service {

common_flags::common_flags(core::cli& cli, service_config& out) : cli_(cli), out_(out) {
  auto& app = cli.app();
  app.add_option("-d,--device", out.device, "Network device: auto, tcp, sm, interface, RDMA device")
      ->capture_default_str();
  app.add_option("-r,--representor", out.representor,
                 "Host representor (a label: accepted and printed)");
  app.add_option("--cpu", out.cpus, "Core for one worker thread (repeat for more workers)")
      ->required()
      ->check(
          CLI::Range(0u, std::max(1u, std::thread::hardware_concurrency()) - 1, "an existing cpu"));
}

void common_flags::add_channel_options() {
  auto& app = cli_.app();
  app.add_option("--command-channel-name", out_.command_channel_name, "Comch server name")
      ->capture_default_str();
  app.add_option("--control-timeout", timeout_seconds_,
                 "Seconds to wait for a peer on the control path (connect, each response)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(24 * 3600)));
  app.add_option("--tls-psk", out_.tls_psk_path,
                 "Pre-shared key file (identity:hexkey lines, as psktool writes): TLS 1.3 to the "
                 "storage targets with the first line's identity and key");
  app.add_flag("--keep-serving", out_.keep_serving,
               "Take session after session until SIGINT/SIGTERM (default: one session, then exit)");
  app.add_option("--max-sessions", out_.max_sessions,
                 "Initiators served at once, each its own session with its own target connections "
                 "and workers (above 1: needs --keep-serving)")
      ->capture_default_str()
      ->check(CLI::Range(1u, storage::max_sessions_limit));
  app.add_option("--keep-alive-timeout", keep_alive_seconds_,
                 "Seconds a client or target may stay silent (keep-alives included) before its "
                 "session ends; 0: never")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(24 * 3600)))
      ->check(core::off_or_at_least(storage::min_keep_alive_seconds));
}

std::optional<int> common_flags::finish(
    std::initializer_list<std::pair<const char*, const std::string*>> storage_addresses,
    std::string_view invalid_line) {
  const std::string& program = cli_.app().get_name();
  out_.poll_mode = cli_.polling();
  if (auto code = cli_.check_device(out_.device)) return code;
  for (const auto& [flag, value] : storage_addresses) {
    try {
      (void)storage::parse_ipv4_endpoint(*value);
    } catch (const status_error& e) {
      std::cerr << program << ": " << flag << ": " << e.what() << "\n";
      return core::exit_bad_usage;
    }
  }
  if (out_.command_channel_name.empty()) {
    std::cerr << program << ": --command-channel-name must not be empty\n";
    return core::exit_bad_usage;
  }
  if (timeout_seconds_ == 0) {
    std::cerr << program << ": control-timeout must not be zero\n";
    std::cerr << program << ": " << invalid_line << "\n";
    return core::exit_bad_usage;
  }
  out_.control_timeout = std::chrono::seconds(timeout_seconds_);
  if (out_.max_sessions > 1 && !out_.keep_serving) {
    std::cerr << program
              << ": --max-sessions above 1 needs --keep-serving (without it the service ends "
                 "after its first session)\n";
    return core::exit_bad_usage;
  }
  if (!storage::load_psk_flag(program, out_.tls_psk_path, out_.tls_psk))
    return core::exit_bad_usage;
  out_.keep_alive_timeout = std::chrono::seconds(keep_alive_seconds_);
  return std::nullopt;
}

void print_config_head(const service_config& config) {
  std::string cpus;
  for (auto c : config.cpus) cpus += fmt::format("{}{}", cpus.empty() ? "" : ", ", c);
  fmt::print("configuration: {{\n");
  fmt::print("\tcpus: [{}]\n", cpus);
  fmt::print("\tdevice: \"{}\"\n", config.device);
  fmt::print("\trepresentor: \"{}\"\n", config.representor);
  if (config.max_sessions != 1) fmt::print("\tmax_sessions: {}\n", config.max_sessions);
}

}  // namespace zc::service
