#include "target_config.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>
#include <thread>

#include "core/cli.hpp"
#include "core/device.hpp"
#include "core/log.hpp"
#include "core/status.hpp"
#include "storage/ipv4_endpoint.hpp"
#include "storage/keep_alive.hpp"

namespace zc::target {

std::optional<int> parse_config(int argc, const char* const* argv, target_config& out) {
  core::cli cli(program_name, "Memory-backed RDMA storage target");
  auto& app = cli.app();
  int port = 0;
  app.add_option("-d,--device", out.device, "Network device: auto, tcp, sm, interface, RDMA device")
      ->capture_default_str();
  app.add_option("--cpu", out.cpus, "Core for one worker thread (repeat for more workers)")
      ->required()
      ->check(
          CLI::Range(0u, std::max(1u, std::thread::hardware_concurrency()) - 1, "an existing cpu"));
  app.add_option("--listen-port", port,
                 "TCP port for the control connection (0: any free port, printed once bound)")
      ->required()
      ->check(CLI::Range(0, 65535));
  app.add_option("--listen-address", out.listen_address,
                 "IPv4 address to listen on (0.0.0.0: every address)")
      ->capture_default_str();
  app.add_option("--tls-psk", out.tls_psk_path,
                 "Pre-shared key file (identity:hexkey lines, as psktool writes): TLS 1.3 on the "
                 "control connection, accepting any identity in the file");
  app.add_option("--binary-content", out.binary_content,
                 "Initial content: a .sbc file or a raw file of block-size x block-count bytes");
  app.add_option("--backing-file", out.backing_file,
                 "Keep the blocks in this file (created with the geometry when missing, reopened "
                 "as it is otherwise) instead of memory")
      ->check([](const std::string& v) { return v.empty() ? "an empty path" : std::string(); });
  CLI::Option* block_count =
      app.add_option("--block-count", out.block_count,
                     "Blocks (ignored with a .sbc file; with an existing backing file: must match)")
          ->capture_default_str();
  app.add_option("--block-size", out.block_size, "Block size in bytes (ignored with a .sbc file)")
      ->capture_default_str();
  app.add_flag("--keep-serving", out.keep_serving,
               "Take the next service after a session ends with shutdown (default: exit then)");
  app.add_option("--max-sessions", out.max_sessions,
                 "Services served at once, each with its own workers and the whole storage "
                 "(above 1: needs --keep-serving)")
      ->capture_default_str()
      ->check(CLI::Range(1u, max_sessions_limit));
  app.add_option("--fail-reads-after", out.fail_reads_after,
                 "Fault injection for tests: refuse every read after the first N with IO_FAILED")
      ->group("Testing");
  app.add_option("--fail-writes-after", out.fail_writes_after,
                 "Fault injection for tests: refuse every write (discards and write zeroes "
                 "included) after the first N with IO_FAILED")
      ->group("Testing");
  app.add_option("--drop-ios-after", out.drop_ios_after,
                 "Fault injection for tests: leave every IO after the first N unanswered")
      ->group("Testing");
  int64_t keep_alive_seconds = storage::default_keep_alive_seconds;
  app.add_option("--keep-alive-timeout", keep_alive_seconds,
                 "Seconds a service may stay silent (keep-alives included) before its session "
                 "ends; 0: never")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(24 * 3600)))
      ->check(core::off_or_at_least(storage::min_keep_alive_seconds));
  if (auto code = cli.parse(argc, argv)) return code;
  out.keep_alive_timeout = std::chrono::seconds(keep_alive_seconds);
  out.listen_port = static_cast<uint16_t>(port);
  out.block_count_given = block_count->count() != 0;
  out.poll_mode = cli.polling();
  if (auto code = cli.check_device(out.device)) return code;
  try {
    out.listen_ipv4 = storage::parse_ipv4_address(out.listen_address);
  } catch (const status_error& e) {
    std::cerr << program_name << ": --listen-address: " << e.what() << "\n";
    return core::exit_bad_usage;
  }
  if (out.max_sessions > 1 && !out.keep_serving) {
    std::cerr << program_name
              << ": --max-sessions above 1 needs --keep-serving (without it one service's "
                 "shutdown would end every other session)\n";
    return core::exit_bad_usage;
  }
  if (!storage::load_psk_flag(program_name, out.tls_psk_path, out.tls_psk))
    return core::exit_bad_usage;
  if (out.binary_content.empty() && (out.block_size == 0 || out.block_count == 0)) {
    std::cerr << program_name
              << ": block-size and block-count must be non zero when binary-content is not "
                 "provided\n";
    return core::exit_bad_usage;
  }
  return std::nullopt;
}

void print_config(const target_config& config) {
  std::string cpus;
  for (auto c : config.cpus) cpus += fmt::format("{}{}", cpus.empty() ? "" : ", ", c);
  fmt::print("configuration: {{\n");
  fmt::print("\tcpus: [{}]\n", cpus);
  fmt::print("\tdevice: \"{}\"\n", config.device);
  fmt::print("\tlisten_port: {}\n", config.listen_port);
  if (config.listen_ipv4 != 0) fmt::print("\tlisten_address: \"{}\"\n", config.listen_address);
  if (config.tls_psk) fmt::print("\ttls_psk: \"{}\"\n", config.tls_psk_path);
  fmt::print("\tbinary_content: \"{}\"\n", config.binary_content);
  fmt::print("\tbacking_file: \"{}\"\n", config.backing_file);
  fmt::print("\tblock_count: {}\n", config.block_count);
  fmt::print("\tblock_size: {}\n", config.block_size);
  if (config.max_sessions != 1) fmt::print("\tmax_sessions: {}\n", config.max_sessions);
  fmt::print("}}\n");
  std::fflush(stdout);
}

void warn_if_unauthenticated(const target_config& config, uint16_t port) {
  constexpr uint32_t loopback_net = 0x7F000000;  // 127.0.0.0/8
  if (config.tls_psk || (config.listen_ipv4 & 0xFF000000) == loopback_net) return;
  ZC_LOG_WARN(
      "serving {} without --tls-psk: anyone who reaches port {} can read, write and shut down "
      "this storage",
      config.listen_address, port);
}

}  // namespace zc::target
