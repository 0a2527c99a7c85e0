// The flags both services take (REFERENCE_SPEC §1.2, §1.3: -d, -r, --cpu,
// --command-channel-name, --control-timeout, plus --poll-mode from core::cli) and the checks they
// share, so that each service's configuration only adds its own storage flags.
// Control path only; not thread-safe.
//
//   service::common_flags common(cli, out);     // -d, -r, --cpu
//   app.add_option("--storage-server", ...);    // the service's own flags
//   common.add_channel_options();               // --command-channel-name, --control-timeout
//   if (auto code = cli.parse(argc, argv)) return code;
//   if (auto code = common.finish({{"--storage-server", &out.storage_server}}, invalid)) ...
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cli.hpp"
#include "core/progress_engine.hpp"
#include "storage/keep_alive.hpp"
#include "storage/tls_psk.hpp"

namespace zc::service {

struct service_config {
  std::string device = "auto";
  std::string representor;  // the host function served (a label; "" or "auto": any)
  std::vector<uint32_t> cpus;
  std::string command_channel_name = "doca_storage_comch";
  std::chrono::seconds control_timeout{5};
  core::poll_mode poll_mode = core::poll_mode::adaptive;
  // Session after session instead of the reference's one (--keep-serving).
  bool keep_serving = false;
  // Clients served at once, each its own session (--max-sessions; above 1 needs keep_serving).
  uint32_t max_sessions = 1;
  // A silent client or target ends its session after this (--keep-alive-timeout; 0: never).
  std::chrono::seconds keep_alive_timeout{storage::default_keep_alive_seconds};
  std::string tls_psk_path;                          // --tls-psk: "" for the plain protocol
  std::shared_ptr<const storage::psk_file> tls_psk;  // its first key is the one used
};

class common_flags {
 public:
  // Adds -d, -r and --cpu to cli (first: the order --help shows).
  common_flags(core::cli& cli, service_config& out);
  // Adds --command-channel-name, --control-timeout, --keep-serving, --max-sessions,
  // --keep-alive-timeout and --tls-psk.
  void add_channel_options();
  // After cli.parse(): the poll mode, the device, each storage address (a.b.c.d:port), the
  // channel name, the control timeout (zero: "control-timeout must not be zero", then
  // `invalid_line`, the reference's last validation line) and the --tls-psk file (read and
  // parsed here). An exit status when one is bad (one clear line on stderr each).
  std::optional<int> finish(
      std::initializer_list<std::pair<const char*, const std::string*>> storage_addresses,
      std::string_view invalid_line);

 private:
  core::cli& cli_;
  service_config& out_;
  int64_t timeout_seconds_ = 5;
  int64_t keep_alive_seconds_ = storage::default_keep_alive_seconds;
};

// The configuration lines both services print, in the reference's order: cpus, device,
// representor. The rest (storage addresses, channel, timeout) is the caller's.
void print_config_head(const service_config& config);

}  // namespace zc::service
