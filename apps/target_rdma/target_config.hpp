// zcstore_target_rdma's configuration: the reference's flags (REFERENCE_SPEC §1.4) plus --json,
// --poll-mode and --backing-file, and the checks it makes before anything starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/progress_engine.hpp"

namespace zc::target {

inline constexpr const char* program_name = "zcstore_target_rdma";

struct target_config {
  std::string device = "auto";
  std::vector<uint32_t> cpus;
  uint16_t listen_port = 0;
  std::string binary_content;
  std::string backing_file;  // empty: the blocks live in memory only
  uint32_t block_count = 128;
  uint32_t block_size = 4096;
  // On the command line (or in the JSON file): an existing backing file must then match exactly.
  bool block_count_given = false;
  core::poll_mode poll_mode = core::poll_mode::adaptive;
};

// Parses and checks argv. Returns an exit status when the program must stop now (help, version,
// or a bad command line: one line on stderr, exit 2).
std::optional<int> parse_config(int argc, const char* const* argv, target_config& out);

// The configuration as the reference prints it.
void print_config(const target_config& config);

}  // namespace zc::target
