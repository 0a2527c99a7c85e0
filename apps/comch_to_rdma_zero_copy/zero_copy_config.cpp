#include "zero_copy_config.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "core/cli.hpp"
#include "core/status.hpp"

namespace zc::zero_copy {

std::optional<int> parse_config(int argc, const char* const* argv, zero_copy_config& out) {
  core::cli cli(program_name,
                "Zero-copy storage service: host IO messages over comch, relayed to "
                "an RDMA storage target");
  service::common_flags common(cli, out);
  cli.app()
      .add_option("--storage-server", out.storage_server, "Storage target: a.b.c.d:port")
      ->required();
  common.add_channel_options();
  int64_t reconnect_seconds = 0;
  cli.app()
      .add_option("--reconnect-timeout", reconnect_seconds,
                  "Seconds a target lost while IOs run is dialled again, the host's IOs held and "
                  "relayed again once it is back; 0: the session ends (the reference)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(3600)));
  if (auto code = cli.parse(argc, argv)) return code;
  out.reconnect_timeout = std::chrono::seconds(reconnect_seconds);
  return common.finish({{"--storage-server", &out.storage_server}},
                       "Invalid zero_copy_app_configuration detected");
}

void print_config(const zero_copy_config& config) {
  service::print_config_head(config);
  fmt::print("\tstorage_server: \"{}\"\n", config.storage_server);
  fmt::print("\tcommand_channel_name: \"{}\"\n", config.command_channel_name);
  fmt::print("\tcontrol_timeout: {}\n", config.control_timeout.count());
  if (config.tls_psk) fmt::print("\ttls_psk: \"{}\"\n", config.tls_psk_path);
  if (config.reconnect_timeout.count() != 0)
    fmt::print("\treconnect_timeout: {}\n", config.reconnect_timeout.count());
  fmt::print("}}\n");
  std::fflush(stdout);
}

}  // namespace zc::zero_copy
