#include "nbd_config.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <thread>

#include "core/cli.hpp"
#include "core/status.hpp"
#include "nbd/protocol.hpp"
#include "nbd/server.hpp"
#include "storage/ipv4_endpoint.hpp"

namespace zc::nbd_app {

std::optional<int> parse_config(int argc, const char* const* argv, nbd_config& out) {
  core::cli cli(program_name, "NBD export of a storage service (host side, over comch)");
  auto& app = cli.app();
  app.add_option("-d,--device", out.device, "Network device: auto, tcp, sm, interface, RDMA device")
      ->capture_default_str();
  app.add_option("--cpu", out.cpus, "Core for one IO worker thread (repeat for more workers)")
      ->required()
      ->check(
          CLI::Range(0u, std::max(1u, std::thread::hardware_concurrency()) - 1, "an existing cpu"));
  app.add_option("--command-channel-name", out.command_channel_name,
                 "Comch server name to connect to")
      ->capture_default_str();
  app.add_option("--transaction-count", out.transaction_count,
                 "IO messages in flight at most per worker (each owns a slice of IO memory)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--control-timeout", out.control_timeout_seconds,
                 "Seconds to wait for each control step")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--keep-alive-timeout", out.keep_alive_seconds,
                 "Seconds the service may leave keep-alives unanswered before the session ends; "
                 "0: send none")
      ->check(CLI::NonNegativeNumber)
      ->check(core::off_or_at_least(storage::min_keep_alive_seconds))
      ->capture_default_str();
  app.add_option("--socket", out.socket, "Serve NBD on this Unix socket");
  app.add_option("--listen", out.listen, "Serve NBD on this TCP address (a.b.c.d:port)");
  app.add_option("--export-name", out.export_name, "The export's name (default: empty)");
  app.add_flag("--read-only", out.read_only, "Refuse writes, zeroes and trims (EPERM)");
  app.add_option("--max-connections", out.max_connections,
                 "Client connections served at once; more are closed at once")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  app.add_option("--request-timeout", out.request_timeout_seconds,
                 "Seconds a WRITE's payload may take to arrive, and replies may sit unread, "
                 "before the connection is closed; 0: no bound")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--idle-timeout", out.idle_timeout_seconds,
                 "Seconds a connection may stay with nothing in flight before it is closed; "
                 "0: never")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--tls", out.tls_flag,
                 "TLS as nbdkit's: off, on (a client may upgrade) or require (default with "
                 "--tls-psk, else off)")
      ->check(CLI::IsMember({"off", "on", "require"}));
  app.add_option("--tls-psk", out.tls_psk_path,
                 "Pre-shared keys for TLS (1.3, or 1.2 for older clients), one identity:hexkey "
                 "line per client (psktool's and nbdkit's format)");
  if (auto code = cli.parse(argc, argv)) return code;
  out.poll_mode = cli.polling();
  if (auto code = cli.check_device(out.device)) return code;
  out.systemd_listeners = nbd::server::listeners_from_systemd();
  if (auto errors = validate(out); !errors.empty()) {
    std::cerr << program_name << ": " << errors.front() << "\n";
    return core::exit_bad_usage;
  }
  if (!storage::load_psk_flag(program_name, out.tls_psk_path, out.tls_keys))
    return core::exit_bad_usage;
  return std::nullopt;
}

std::vector<std::string> validate(const nbd_config& config) {
  std::vector<std::string> errors;
  if (config.transaction_count == 0) errors.emplace_back("transaction-count must not be zero");
  if (config.transaction_count > (1u << 16))
    errors.emplace_back("transaction-count must be at most 65536");
  if (config.control_timeout_seconds == 0) errors.emplace_back("control-timeout must not be zero");
  if (config.socket.empty() && config.listen.empty() && config.systemd_listeners == 0)
    errors.emplace_back("nowhere to serve: give --socket PATH and/or --listen ADDR:PORT");
  if (!config.listen.empty()) {
    try {
      (void)storage::parse_ipv4_endpoint(config.listen);
    } catch (const status_error& e) {
      errors.push_back(fmt::format("--listen: {}", e.what()));
    }
  }
  if ((config.tls_flag == "on" || config.tls_flag == "require") && config.tls_psk_path.empty())
    errors.push_back(
        fmt::format("--tls {} needs --tls-psk FILE (pre-shared keys are the only TLS "
                    "credentials zcstore_nbd takes)",
                    config.tls_flag));
  if (config.export_name.size() > nbd::max_string_length)
    errors.push_back(fmt::format("export-name longer than {} bytes", nbd::max_string_length));
  return errors;
}

void print_config(const nbd_config& config) {
  std::string cpus;
  for (auto c : config.cpus) cpus += fmt::format("{}{}", cpus.empty() ? "" : ", ", c);
  std::string out = "configuration: {\n";
  out += fmt::format("\tcpus: [{}]\n", cpus);
  out += fmt::format("\tdevice: \"{}\"\n", config.device);
  out += fmt::format("\tcommand_channel_name: \"{}\"\n", config.command_channel_name);
  out += fmt::format("\ttransaction_count: {}\n", config.transaction_count);
  out += fmt::format("\tcontrol_timeout: {}\n", config.control_timeout_seconds);
  out += fmt::format("\tsocket: \"{}\"\n", config.socket);
  out += fmt::format("\tlisten: \"{}\"\n", config.listen);
  out += fmt::format("\texport_name: \"{}\"\n", config.export_name);
  out += fmt::format("\tread_only: {}\n", config.read_only);
  out += fmt::format("\tmax_connections: {}\n", config.max_connections);
  out += fmt::format("\trequest_timeout: {}\n", config.request_timeout_seconds);
  out += fmt::format("\tidle_timeout: {}\n", config.idle_timeout_seconds);
  out += fmt::format("\ttls: \"{}\"\n", nbd::to_string(config.tls()));
  out += fmt::format("\ttls_psk: \"{}\"\n", config.tls_psk_path);
  out += fmt::format("\tsystemd_listeners: {}\n", config.systemd_listeners);
  out += "}\n";
  // On stderr: with socket activation stdout may be the client's (nbdinfo -- [ ... ]).
  std::fputs(out.c_str(), stderr);
}

}  // namespace zc::nbd_app
