// zcstore_comch_to_rdma_zero_copy's configuration: the reference's flags (REFERENCE_SPEC §1.2)
// plus --json, --poll-mode and the log levels, and the checks made before anything starts.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "service/service_config.hpp"

namespace zc::zero_copy {

inline constexpr const char* program_name = "zcstore_comch_to_rdma_zero_copy";

struct zero_copy_config : service::service_config {
  std::string storage_server;  // "a.b.c.d:port", checked
  // --reconnect-timeout: how long a target lost mid-session is dialled again (0: the session ends).
  std::chrono::seconds reconnect_timeout{0};
};

// Parses and checks argv. Returns an exit status when the program must stop now (help, version,
// or a bad command line: one line on stderr, exit 2).
std::optional<int> parse_config(int argc, const char* const* argv, zero_copy_config& out);

// The configuration as the reference prints it.
void print_config(const zero_copy_config& config);

}  // namespace zc::zero_copy
