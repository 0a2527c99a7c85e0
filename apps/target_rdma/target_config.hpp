// zcstore_target_rdma's configuration: the reference's flags (REFERENCE_SPEC §1.4) plus --json,
// --poll-mode and --backing-file, and the checks it makes before anything starts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/progress_engine.hpp"
#include "storage/tls_psk.hpp"
#include "target/session.hpp"
#include "target/storage.hpp"

namespace zc::target {

inline constexpr const char* program_name = "zcstore_target_rdma";

// The library's two option sets (src/target/) plus what only the program has.
struct target_config : service_options, storage_options {
  uint16_t listen_port = 0;
  std::string listen_address = "0.0.0.0";  // --listen-address, checked
  uint32_t listen_ipv4 = 0;                // the same, host byte order
  std::string tls_psk_path;                // --tls-psk: "" for the plain protocol
  std::shared_ptr<const storage::psk_file> tls_psk;
};

// Parses and checks argv. Returns an exit status when the program must stop now (help, version,
// or a bad command line: one line on stderr, exit 2).
std::optional<int> parse_config(int argc, const char* const* argv, target_config& out);

// The configuration as the reference prints it (plus listen_address and tls_psk when given).
void print_config(const target_config& config);

// Logs a warning when the control port is reachable from other hosts without --tls-psk: whoever
// reaches it could read, write and shut down the storage.
void warn_if_unauthenticated(const target_config& config, uint16_t port);

}  // namespace zc::target
