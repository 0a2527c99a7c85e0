// `zcstore_local gga`: its options, and the command lines of the programs it runs (the sbc
// generator, three targets, the gga offload service, the initiator), as pure functions so that
// tests need no process. Control path only; not thread-safe.
//
//   auto parsed = zc::local::parse_gga_options(words);   // the words after "gga"
//   if (parsed.exit_code) return *parsed.exit_code;
//   auto argv = zc::local::generator_argv(parsed.options, generator_path, plain, images);
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zero_copy_plan.hpp"

namespace zc::local {

// The block size the initiator sees (the generator's --block-size); each target holds half.
inline constexpr uint32_t default_gga_block_size = 8192;
// The size of the plain file zcstore_local makes when no --content is given.
inline constexpr uint64_t default_gga_content_size = 16ull << 20;
inline constexpr const char* default_gga_execution_strategy = "read_only_data_validity_test";
inline constexpr uint64_t default_gga_run_limit_operation_count = 20'000;

struct gga_options {
  // Device, cores, poll mode, control timeout, log levels, --bin-dir and the initiator's words
  // and defaults, as for zero-copy. common.content is --content (empty: a generated file),
  // common.target_size the generated file's size, common.block_size the host's block size.
  zero_copy_options common;
  std::string matrix_type = "vandermonde";
  uint64_t recovery_every = 0;  // the service's --trigger-recovery-read-every-n; 0: never
};

struct gga_parse_result {
  gga_options options;
  std::optional<int> exit_code;  // as parse_result::exit_code
};

// The three target images the generator writes: data 1, data 2, parity.
struct gga_images {
  std::string data_1, data_2, data_p;
};

// Parses the words after "gga". Everything after the first "--" is the initiator's.
gga_parse_result parse_gga_options(const std::vector<std::string>& words);

// The images' paths in `dir`.
gga_images gga_image_paths(const std::string& dir);

std::vector<std::string> generator_argv(const gga_options& options, const std::string& program,
                                        const std::string& plain, const gga_images& images);

// A target serving `image` (data 1, data 2 or parity; it carries its geometry) on a free port.
// Target `index` (0..2) keeps its blocks in its --backing-dir file when one was given.
std::vector<std::string> gga_target_argv(const gga_options& options, const std::string& program,
                                         const std::string& image,
                                         const std::vector<uint32_t>& cores, uint32_t index = 0);

std::vector<std::string> gga_service_argv(const gga_options& options, const std::string& program,
                                          const std::string& channel,
                                          const std::array<uint16_t, 3>& target_ports,
                                          const std::vector<uint32_t>& cores);

// As initiator_argv, with read_only_data_validity_test, a run limit of 20000 and
// --storage-plain-content `plain` as defaults.
std::vector<std::string> gga_initiator_argv(const gga_options& options, const std::string& program,
                                            const std::string& channel, const std::string& plain,
                                            const std::vector<uint32_t>& cores);

}  // namespace zc::local
