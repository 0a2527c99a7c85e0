// zcstore_comch_to_rdma_zero_copy: the zero-copy storage service. Serves one host initiator
// over comch and relays its IO messages to one RDMA storage target, which moves the data
// straight to and from the host's memory (REFERENCE_SPEC §2.7, §3.6).
// Exit status: 0 after a session ended with shutdown (or Ctrl-C before any client), 1 when the
// session failed (client or target lost, Ctrl-C mid-session, data-path errors), 2 for bad flags.
// With --keep-serving it takes session after session until SIGINT/SIGTERM: 0, or 1 when any
// session's data path had errors.
#include "core/cli.hpp"
#include "core/device.hpp"
#include "core/log.hpp"
#include "core/thread.hpp"
#include "service/client_session.hpp"
#include "service/session_loop.hpp"
#include "service/target_set.hpp"
#include "service/zero_copy_session.hpp"
#include "storage/comch_session_server.hpp"
#include "storage/stats.hpp"
#include "zero_copy_config.hpp"

int main(int argc, char** argv) {
  using namespace zc;
  core::print_banner(zero_copy::program_name, ZC_VERSION_STRING);
  zero_copy::zero_copy_config config;
  if (auto code = zero_copy::parse_config(argc, argv, config)) return *code;
  zero_copy::print_config(config);
  core::install_stop_signal_handlers();
  return core::run_guarded(zero_copy::program_name, [&] {
    const auto timeout =
        std::chrono::duration_cast<std::chrono::milliseconds>(config.control_timeout);
    const auto keep_alive =
        std::chrono::duration_cast<std::chrono::milliseconds>(config.keep_alive_timeout);
    core::device device = core::device::open(config.device);
    auto connect = [&] {
      return std::make_unique<service::target_set>(std::vector<std::string>{config.storage_server},
                                                   timeout, keep_alive, config.tls_psk);
    };
    auto targets = connect();
    storage::comch_session_server server(config.representor, config.command_channel_name,
                                         config.max_sessions);
    // A launcher waits for this line before it starts the initiator.
    ZC_LOG_INFO("listening on channel {}", config.command_channel_name);
    std::vector<storage::core_stats> idle;
    for (uint32_t cpu : config.cpus) idle.push_back({cpu, 0, std::nullopt, 0, 0});
    return service::serve_sessions(
        config, server, std::move(targets), connect,
        [&](service::target_set& session_targets, service::client_link& client) {
          service::zero_copy_session session(
              {config.cpus, config.poll_mode, timeout,
               std::chrono::duration_cast<std::chrono::milliseconds>(config.reconnect_timeout)},
              device, session_targets, client);
          const service::session_outcome outcome = service::serve_client(client, session);
          return service::session_result{outcome, session.data_path_errors(),
                                         storage::format_core_stats(session.stats())};
        },
        storage::format_core_stats(idle));
  });
}
