// zcstore_target_rdma's configuration: the reference's flags (REFERENCE_SPEC §1.4) plus --json,
// --poll-mode and --backing-file, and the checks it makes before anything starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/progress_engine.hpp"
#include "target/session.hpp"
#include "target/storage.hpp"

namespace zc::target {

inline constexpr const char* program_name = "zcstore_target_rdma";

// The library's two option sets (src/target/) plus what only the program has.
struct target_config : service_options, storage_options {
  uint16_t listen_port = 0;
};

// Parses and checks argv. Returns an exit status when the program must stop now (help, version,
// or a bad command line: one line on stderr, exit 2).
std::optional<int> parse_config(int argc, const char* const* argv, target_config& out);

// The configuration as the reference prints it.
void print_config(const target_config& config);

}  // namespace zc::target
