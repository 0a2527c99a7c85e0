#include "gga_config.hpp"

#include <fmt/format.h>

#include <iostream>
#include <thread>

#include "core/cli.hpp"
#include "core/status.hpp"
#include "storage/ipv4_endpoint.hpp"

namespace zc::gga_offload {

std::optional<int> parse_config(int argc, const char* const* argv, gga_config& out) {
  core::cli cli(program_name,
                "GGA offload storage service: host IO messages over comch, each block LZ4 "
                "compressed and spread over three RDMA storage targets with 2+1 erasure coding");
  auto& app = cli.app();
  int64_t timeout = 5;
  std::string matrix = "vandermonde";
  app.add_option("-d,--device", out.device, "Network device: auto, tcp, sm, interface, RDMA device")
      ->capture_default_str();
  app.add_option("-r,--representor", out.representor,
                 "Host representor (a label: accepted and printed)");
  app.add_option("--cpu", out.cpus, "Core for one worker thread (repeat for more workers)")
      ->required()
      ->check(
          CLI::Range(0u, std::max(1u, std::thread::hardware_concurrency()) - 1, "an existing cpu"));
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
  app.add_option("--command-channel-name", out.command_channel_name, "Comch server name")
      ->capture_default_str();
  app.add_option("--control-timeout", timeout,
                 "Seconds to wait for a peer on the control path (connect, each response)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(24 * 3600)));
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
  if (auto code = cli.parse(argc, argv)) return code;
  out.poll_mode = cli.polling();
  if (auto code = cli.check_device(out.device)) return code;
  for (auto [flag, value] : {std::pair{"--data-1-storage", &out.data_1_storage},
                             std::pair{"--data-2-storage", &out.data_2_storage},
                             std::pair{"--data-p-storage", &out.data_p_storage}}) {
    try {
      (void)storage::parse_ipv4_endpoint(*value);
    } catch (const status_error& e) {
      std::cerr << program_name << ": " << flag << ": " << e.what() << "\n";
      return core::exit_bad_usage;
    }
  }
  if (auto m = accel::parse_ec_matrix(matrix)) {
    out.matrix = *m;
  } else {
    std::cerr << program_name << ": Unknown doca_ec matrix type: " << matrix
              << " (vandermonde or cauchy)\n";
    return core::exit_bad_usage;
  }
  if (out.command_channel_name.empty()) {
    std::cerr << program_name << ": --command-channel-name must not be empty\n";
    return core::exit_bad_usage;
  }
  if (timeout == 0) {
    std::cerr << program_name << ": control-timeout must not be zero\n";
    std::cerr << program_name << ": Invalid gga_offload_app_configuration detected\n";
    return core::exit_bad_usage;
  }
  out.control_timeout = std::chrono::seconds(timeout);
  return std::nullopt;
}

void print_config(const gga_config& config) {
  std::string cpus;
  for (auto c : config.cpus) cpus += fmt::format("{}{}", cpus.empty() ? "" : ", ", c);
  fmt::print("configuration: {{\n");
  fmt::print("\tcpus: [{}]\n", cpus);
  fmt::print("\tdevice: \"{}\"\n", config.device);
  fmt::print("\trepresentor: \"{}\"\n", config.representor);
  fmt::print("\tdata_1_storage: \"{}\"\n", config.data_1_storage);
  fmt::print("\tdata_2_storage: \"{}\"\n", config.data_2_storage);
  fmt::print("\tdata_p_storage: \"{}\"\n", config.data_p_storage);
  fmt::print("\tmatrix_type: \"{}\"\n", accel::to_string(config.matrix));
  fmt::print("\tcommand_channel_name: \"{}\"\n", config.command_channel_name);
  fmt::print("\tcontrol_timeout: {}\n", config.control_timeout.count());
  fmt::print("\ttrigger_recovery_read_every_n: {}\n", config.trigger_recovery_read_every_n);
  fmt::print("}}\n");
  std::fflush(stdout);
}

}  // namespace zc::gga_offload
