// zcstore_nbd's configuration: the flags of zcstore_initiator_comch that attach to a service
// (--command-channel-name, --cpu, --transaction-count, --control-timeout, -d, --poll-mode, -l,
// -j) plus where to serve NBD (--socket, --listen, or sockets handed over by systemd), the export
// name and --read-only. Control path only.
//
//   zc::nbd_app::nbd_config config;
//   if (auto code = zc::nbd_app::parse_config(argc, argv, config)) return *code;
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/progress_engine.hpp"
#include "nbd/server.hpp"
#include "storage/keep_alive.hpp"
#include "storage/tls_psk.hpp"

namespace zc::nbd_app {

inline constexpr const char* program_name = "zcstore_nbd";

struct nbd_config {
  std::string device = "auto";
  std::vector<uint32_t> cpus;  // one IO worker per entry
  std::string command_channel_name = "doca_storage_comch";
  uint32_t transaction_count = 64;  // slots per worker: IO messages in flight
  uint32_t control_timeout_seconds = 5;
  // The service is lost once it answered no keep-alive for this long (0: none are sent).
  uint32_t keep_alive_seconds = storage::default_keep_alive_seconds;
  core::poll_mode poll_mode = core::poll_mode::adaptive;
  std::string socket;  // Unix socket path
  std::string listen;  // "a.b.c.d:port"
  std::string export_name;
  bool read_only = false;
  uint32_t max_connections = 64;          // more are refused at once
  uint32_t request_timeout_seconds = 30;  // a WRITE's payload, unread replies; 0: no bound
  uint32_t idle_timeout_seconds = 0;      // nothing in flight for this long; 0: never
  // --tls off|on|require as given ("" when not) and the keys of --tls-psk FILE.
  std::string tls_flag;
  std::string tls_psk_path;
  std::shared_ptr<const storage::psk_file> tls_keys;
  // Listening sockets from systemd (LISTEN_PID/LISTEN_FDS), found at parse time.
  int systemd_listeners = 0;

  std::chrono::seconds keep_alive_timeout() const {
    return std::chrono::seconds(keep_alive_seconds);
  }
  // What --tls says; without it, require when a key file is given, else off.
  nbd::tls_mode tls() const {
    if (tls_flag == "on") return nbd::tls_mode::on;
    if (tls_flag == "require" || (tls_flag.empty() && !tls_psk_path.empty()))
      return nbd::tls_mode::require;
    return nbd::tls_mode::off;
  }
  std::chrono::seconds control_timeout() const {
    return std::chrono::seconds(control_timeout_seconds);
  }
};

// Parses argv (and -j FILE). Returns an exit status when the program must stop now: 0 after
// -h/-v, core::exit_bad_usage (2) after one line on stderr naming the problem. nullopt: go on.
std::optional<int> parse_config(int argc, const char* const* argv, nbd_config& out);

// Every problem with the configuration; empty when it can be used.
std::vector<std::string> validate(const nbd_config& config);

void print_config(const nbd_config& config);

}  // namespace zc::nbd_app
