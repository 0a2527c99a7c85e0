// zcstore_target_rdma: a memory- or file-backed block store serving IO over the rdma layer.
#include <cstdio>

#include "core/cli.hpp"
#include "core/log.hpp"
#include "core/thread.hpp"
#include "storage/tcp_control_channel.hpp"
#include "target/session.hpp"
#include "target/storage.hpp"
#include "target_config.hpp"

int main(int argc, char** argv) {
  using namespace zc;
  core::print_banner(target::program_name, ZC_VERSION_STRING);
  target::target_config config;
  if (auto code = target::parse_config(argc, argv, config)) return *code;
  return core::run_guarded(target::program_name, [&] {
    // Opening the storage settles the geometry (a .sbc content or an existing backing file
    // decides it), so the configuration is printed after it.
    auto storage = target::target_storage::open(config);
    target::print_config(config);
    core::install_stop_signal_handlers();
    ZC_LOG_INFO("storage: {} blocks of {} bytes ({} bytes, {})", config.block_count,
                config.block_size, storage->map().size(),
                storage->durable() ? "durable" : "volatile");

    // With --listen-port 0 the kernel picks the port: this line is how a launcher learns it.
    storage::tcp_listener listener(config.listen_port, {config.listen_ipv4, config.tls_psk});
    ZC_LOG_INFO("listening on port {}", listener.port());
    target::warn_if_unauthenticated(config, listener.port());
    target::target_service service(config, *storage, config.block_size);
    return service.run(listener);
  });
}
