// zcstore_comch_to_rdma_gga_offload: the GGA offload storage service. Serves one host initiator
// over comch; spreads every block, LZ4 compressed, over three RDMA storage targets (two data
// halves and a 2+1 erasure-coding parity half) and decompresses reads straight into the host's
// pages (REFERENCE_SPEC §2.8, §6).
// Exit status: 0 after a session ended with shutdown (or Ctrl-C before any client), also when it
// ran degraded after losing one target; 1 when the session failed (client or a target lost before
// the data path ran, two targets lost, Ctrl-C mid-session, data-path errors), 2 for bad flags.
// With --keep-serving it takes session after session until SIGINT/SIGTERM: 0, or 1 when any
// session's data path had errors.
#include <cstdio>

#include "core/cli.hpp"
#include "core/device.hpp"
#include "core/log.hpp"
#include "core/thread.hpp"
#include "gga_config.hpp"
#include "service/client_session.hpp"
#include "service/gga_session.hpp"
#include "service/session_loop.hpp"
#include "service/target_set.hpp"
#include "storage/comch_session_server.hpp"
#include "storage/stats.hpp"

int main(int argc, char** argv) {
  using namespace zc;
  core::print_banner(gga_offload::program_name, ZC_VERSION_STRING);
  std::printf("\tWrite flow supported: yes\n");
  std::fflush(stdout);
  gga_offload::gga_config config;
  if (auto code = gga_offload::parse_config(argc, argv, config)) return *code;
  gga_offload::print_config(config);
  core::install_stop_signal_handlers();
  return core::run_guarded(gga_offload::program_name, [&] {
    const auto timeout =
        std::chrono::duration_cast<std::chrono::milliseconds>(config.control_timeout);
    const auto keep_alive =
        std::chrono::duration_cast<std::chrono::milliseconds>(config.keep_alive_timeout);
    core::device device = core::device::open(config.device);
    // Connect order data_1, data_2, data_p (§2.8).
    auto connect = [&] {
      return std::make_unique<service::target_set>(
          std::vector<std::string>{config.data_1_storage, config.data_2_storage,
                                   config.data_p_storage},
          timeout, keep_alive, config.tls_psk);
    };
    auto targets = connect();
    storage::comch_session_server server(config.representor, config.command_channel_name,
                                         config.max_sessions);
    // A launcher waits for this line before it starts the initiator.
    ZC_LOG_INFO("listening on channel {}", config.command_channel_name);
    std::vector<storage::core_stats> idle;
    for (uint32_t cpu : config.cpus) idle.push_back({cpu, 0, uint64_t(0), 0, 0});
    return service::serve_sessions(
        config, server, std::move(targets), connect,
        [&](service::target_set& session_targets, service::client_link& client) {
          service::gga_session session(
              {config.cpus, config.poll_mode, timeout, config.matrix,
               config.trigger_recovery_read_every_n, config.format, config.rebuild_rate_mib},
              device, session_targets, client);
          const service::session_outcome outcome = service::serve_client(client, session);
          std::string stats = storage::format_core_stats(session.stats());
          const uint8_t lost = session.lost_targets();
          for (uint32_t k = 0; k < service::gga_target_count; ++k)
            if ((lost & (1u << k)) != 0)
              stats += fmt::format("| Storage: degraded, {} lost\n", session_targets.name(k));
          return service::session_result{outcome, session.data_path_errors(), std::move(stats)};
        },
        storage::format_core_stats(idle));
  });
}
