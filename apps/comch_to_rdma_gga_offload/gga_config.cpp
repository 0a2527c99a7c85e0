#include "gga_config.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <iostream>

#include "core/cli.hpp"
#include "core/status.hpp"

namespace zc::gga_offload {

std::optional<int> parse_config(int argc, const char* const* argv, gga_config& out) {
  core::cli cli(program_name,
                "GGA offload storage service: host IO messages over comch, each block LZ4 "
                "compressed and spread over three RDMA storage targets with 2+1 erasure coding");
  service::common_flags common(cli, out);
  auto& app = cli.app();
  std::string matrix = "vandermonde";
  app.add_option("--data-1-storage", out.data_1_storage,
                 "Target holding the first half of each block: a.b.c.d:port")
      ->required();
  app.add_option("--data-2-storage", out.data_2_storage,
                 "Target holding the second half of each block: a.b.c.d:port")
      ->required();
  app.add_option("--data-p-storage", out.data_p_storage,
                 "Target holding the parity half of each block: a.b.c.d:port")
      ->required();
  app.add_option("--matrix-type", matrix, "Erasure coding matrix: vandermonde or cauchy")
      ->capture_default_str();
  common.add_channel_options();
  app.add_option("--trigger-recovery-read-every-n", out.trigger_recovery_read_every_n,
                 "Serve every n-th block read of a worker through EC recovery (0: never)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            return !v.empty() && v.find_first_not_of("0123456789") == std::string::npos
                       ? std::string()
                       : "must be a whole number, 0 or more";
          },
          "N"));
  std::string format(accel::to_string(out.format));
  app.add_option("--gga-format", format,
                 "How blocks are stored on the targets: v2 (each block's generation and crc32c "
                 "with it, every read verified, incompressible blocks stored raw) or v1 (the "
                 "reference's images, read without verification)")
      ->capture_default_str();
  app.add_option("--rebuild-rate", out.rebuild_rate_mib,
                 "MiB/s at which a blank replacement target is rebuilt in the background while IO "
                 "goes on (format v2); 0: only as its blocks are read")
      ->capture_default_str()
      ->check(CLI::Range(0u, 1u << 20));
  if (auto code = cli.parse(argc, argv)) return code;
  if (auto f = accel::parse_gga_format(format)) {
    out.format = *f;
  } else {
    std::cerr << program_name << ": --gga-format " << format << ": must be v1 or v2\n";
    return core::exit_bad_usage;
  }
  if (auto code = common.finish({{"--data-1-storage", &out.data_1_storage},
                                 {"--data-2-storage", &out.data_2_storage},
                                 {"--data-p-storage", &out.data_p_storage}},
                                "Invalid gga_offload_app_configuration detected"))
    return code;
  if (auto m = accel::parse_ec_matrix(matrix)) {
    out.matrix = *m;
  } else {
    std::cerr << program_name << ": Unknown doca_ec matrix type: " << matrix
              << " (vandermonde or cauchy)\n";
    return core::exit_bad_usage;
  }
  return std::nullopt;
}

void print_config(const gga_config& config) {
  service::print_config_head(config);
  fmt::print("\tdata_1_storage: \"{}\"\n", config.data_1_storage);
  fmt::print("\tdata_2_storage: \"{}\"\n", config.data_2_storage);
  fmt::print("\tdata_p_storage: \"{}\"\n", config.data_p_storage);
  fmt::print("\tmatrix_type: \"{}\"\n", accel::to_string(config.matrix));
  fmt::print("\tcommand_channel_name: \"{}\"\n", config.command_channel_name);
  fmt::print("\tcontrol_timeout: {}\n", config.control_timeout.count());
  if (config.tls_psk) fmt::print("\ttls_psk: \"{}\"\n", config.tls_psk_path);
  fmt::print("\ttrigger_recovery_read_every_n: {}\n", config.trigger_recovery_read_every_n);
  fmt::print("\tgga_format: \"{}\"\n", accel::to_string(config.format));
  fmt::print("\trebuild_rate: {}\n", config.rebuild_rate_mib);
  fmt::print("}}\n");
  std::fflush(stdout);
}

}  // namespace zc::gga_offload
