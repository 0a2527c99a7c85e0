// zcstore_gga_offload_sbc_generator's configuration: the reference's flags (REFERENCE_SPEC §1.5),
// zcstore's --format, the common ones (-j/--json, log levels), and the checks made before any
// file is touched.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "accel/ec_engine.hpp"
#include "accel/gga_format.hpp"

namespace zc::sbc_generator {

inline constexpr const char* program_name = "zcstore_gga_offload_sbc_generator";

// The reference's --block-size rule (REFERENCE_SPEC §1.5): a multiple of 64.
inline constexpr uint32_t block_size_multiple = 64;
// The largest block accepted: the generator holds a few blocks in memory at once, and an .sbc file
// holds at most 2 GiB anyway.
inline constexpr uint32_t max_block_size = 64u << 20;

struct generator_config {
  // Accepted for the reference's command lines; EC and LZ4 run in software here.
  std::string device = "auto";
  std::string input;
  uint32_t block_size = 4096;  // B, the initiator's block; each .sbc file holds B/2 per block
  accel::ec_matrix matrix = accel::ec_matrix::vandermonde;
  // v2 (docs/FORMATS.md §4.3): an entry beside every half, incompressible blocks stored raw, a
  // label block; v1: the reference's bytes.
  accel::gga_format format = accel::gga_format::v2;
  std::string data_1;
  std::string data_2;
  std::string data_p;
};

// Parses and checks argv. Returns an exit status when the program must stop now (help, version,
// or a bad command line: one line on stderr, exit 2).
std::optional<int> parse_config(int argc, const char* const* argv, generator_config& out);

// The configuration, printed as the reference does before it starts.
void print_config(const generator_config& config);

}  // namespace zc::sbc_generator
