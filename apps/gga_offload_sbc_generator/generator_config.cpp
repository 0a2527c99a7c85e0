#include "generator_config.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "core/cli.hpp"

namespace zc::sbc_generator {

std::optional<int> parse_config(int argc, const char* const* argv, generator_config& out) {
  core::cli cli(program_name, "Turns a plain file into the three .sbc files of the gga targets");
  auto& app = cli.app();
  std::string matrix = std::string(accel::to_string(out.matrix));
  std::string format = std::string(accel::to_string(out.format));
  app.add_option("-d,--device", out.device, "Accepted for compatibility; EC runs in software")
      ->capture_default_str();
  app.add_option("--original-input-data", out.input, "Input file")->required();
  app.add_option("--block-size", out.block_size,
                 "Block size B the initiator will use (a multiple of 64); each output file holds "
                 "B/2 bytes per block")
      ->capture_default_str();
  app.add_option("--matrix-type", matrix, "Erasure coding matrix: vandermonde or cauchy")
      ->check(CLI::IsMember({"vandermonde", "cauchy"}))
      ->capture_default_str();
  app.add_option("--format", format,
                 "Image format: v2 (an entry with generation and crc32c beside every half, "
                 "incompressible blocks stored raw, a label block at the end of each file; "
                 "docs/FORMATS.md §4.3) or v1 (the reference's bytes; refuses incompressible "
                 "blocks)")
      ->check(CLI::IsMember({"v1", "v2"}))
      ->capture_default_str();
  app.add_option("--data-1", out.data_1, "Output .sbc file for the first halves")->required();
  app.add_option("--data-2", out.data_2, "Output .sbc file for the second halves")->required();
  app.add_option("--data-p", out.data_p, "Output .sbc file for the parity halves")->required();
  if (auto code = cli.parse(argc, argv)) return code;
  out.matrix = *accel::parse_ec_matrix(matrix);
  out.format = *accel::parse_gga_format(format);
  // The reference let 0 through its multiple-of-64 check and then divided by zero (§8.6).
  if (out.block_size == 0 || out.block_size % block_size_multiple != 0) {
    std::cerr << program_name << ": --block-size " << out.block_size
              << ": Block size must be a multiple of 64" << (out.block_size == 0 ? ", not 0" : "")
              << "\n";
    return core::exit_bad_usage;
  }
  if (out.block_size > max_block_size) {
    std::cerr << program_name << ": --block-size " << out.block_size << ": at most "
              << max_block_size << "\n";
    return core::exit_bad_usage;
  }
  return std::nullopt;
}

void print_config(const generator_config& config) {
  fmt::print("configuration: {{\n");
  fmt::print("\tdevice: \"{}\"\n", config.device);
  fmt::print("\toriginal_input_data: \"{}\"\n", config.input);
  fmt::print("\tblock_size: {}\n", config.block_size);
  fmt::print("\tmatrix_type: \"{}\"\n", accel::to_string(config.matrix));
  fmt::print("\tformat: \"{}\"\n", accel::to_string(config.format));
  fmt::print("\tdata_1: \"{}\"\n", config.data_1);
  fmt::print("\tdata_2: \"{}\"\n", config.data_2);
  fmt::print("\tdata_p: \"{}\"\n", config.data_p);
  fmt::print("}}\n");
  std::fflush(stdout);
}

}  // namespace zc::sbc_generator
