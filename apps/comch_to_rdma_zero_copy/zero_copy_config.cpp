#include "zero_copy_config.hpp"

#include <fmt/format.h>

#include <iostream>
#include <thread>

#include "core/cli.hpp"
#include "core/status.hpp"
#include "storage/ipv4_endpoint.hpp"

namespace zc::zero_copy {

std::optional<int> parse_config(int argc, const char* const* argv, zero_copy_config& out) {
  core::cli cli(program_name,
                "Zero-copy storage service: host IO messages over comch, relayed to "
                "an RDMA storage target");
  auto& app = cli.app();
  int64_t timeout = 5;
  app.add_option("-d,--device", out.device, "Network device: auto, tcp, sm, interface, RDMA device")
      ->capture_default_str();
  app.add_option("-r,--representor", out.representor,
                 "Host representor (a label: accepted and printed)");
  app.add_option("--cpu", out.cpus, "Core for one worker thread (repeat for more workers)")
      ->required()
      ->check(
          CLI::Range(0u, std::max(1u, std::thread::hardware_concurrency()) - 1, "an existing cpu"));
  app.add_option("--storage-server", out.storage_server, "Storage target: a.b.c.d:port")
      ->required();
  app.add_option("--command-channel-name", out.command_channel_name, "Comch server name")
      ->capture_default_str();
  app.add_option("--control-timeout", timeout,
                 "Seconds to wait for a peer on the control path (connect, each response)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(24 * 3600)));
  if (auto code = cli.parse(argc, argv)) return code;
  out.poll_mode = cli.polling();
  if (auto code = cli.check_device(out.device)) return code;
  try {
    (void)storage::parse_ipv4_endpoint(out.storage_server);
  } catch (const status_error& e) {
    std::cerr << program_name << ": --storage-server: " << e.what() << "\n";
    return core::exit_bad_usage;
  }
  if (out.command_channel_name.empty()) {
    std::cerr << program_name << ": --command-channel-name must not be empty\n";
    return core::exit_bad_usage;
  }
  if (timeout == 0) {
    std::cerr << program_name << ": control-timeout must not be zero\n";
    std::cerr << program_name << ": Invalid zero_copy_app_configuration detected\n";
    return core::exit_bad_usage;
  }
  out.control_timeout = std::chrono::seconds(timeout);
  return std::nullopt;
}

void print_config(const zero_copy_config& config) {
  std::string cpus;
  for (auto c : config.cpus) cpus += fmt::format("{}{}", cpus.empty() ? "" : ", ", c);
  fmt::print("configuration: {{\n");
  fmt::print("\tcpus: [{}]\n", cpus);
  fmt::print("\tdevice: \"{}\"\n", config.device);
  fmt::print("\trepresentor: \"{}\"\n", config.representor);
  fmt::print("\tstorage_server: \"{}\"\n", config.storage_server);
  fmt::print("\tcommand_channel_name: \"{}\"\n", config.command_channel_name);
  fmt::print("\tcontrol_timeout: {}\n", config.control_timeout.count());
  fmt::print("}}\n");
  std::fflush(stdout);
}

}  // namespace zc::zero_copy
