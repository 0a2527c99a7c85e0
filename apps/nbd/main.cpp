// zcstore_nbd: an NBD export of a storage service (issue 10). Attaches to the service over comch
// like zcstore_initiator_comch (connect, query, init, one IO worker per --cpu, start), then
// serves the storage to NBD clients (qemu-img, nbdcopy, nbdinfo, fio's nbd engine) on a Unix
// socket, a TCP address or sockets handed over by systemd, until SIGINT/SIGTERM; then the
// requests in flight finish, and the session is stopped and shut down.
// Exit status: 0 after a stop signal, 1 when the service was lost or setup failed (requests in
// flight then fail with EIO), 2 bad usage.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <thread>

#include "core/cli.hpp"
#include "core/log.hpp"
#include "core/thread.hpp"
#include "host/session.hpp"
#include "nbd/host_backend.hpp"
#include "nbd/server.hpp"
#include "nbd_config.hpp"

namespace {

using namespace zc;
using namespace std::chrono_literals;

// How often the control thread looks at the service and at the stop flag.
constexpr auto watch_slice = 100ms;

int run(const nbd_app::nbd_config& config) {
  host::session session({.device = config.device,
                         .channel_name = config.command_channel_name,
                         .control_timeout = config.control_timeout(),
                         .keep_alive_timeout = config.keep_alive_timeout(),
                         .poll_mode = config.poll_mode});
  const auto workers = static_cast<uint32_t>(config.cpus.size());
  nbd::host_backend_options backend_options;
  try {
    const auto info = session.query();
    backend_options = {.capacity = info.capacity,
                       .block_size = info.block_size,
                       .slots_per_worker = config.transaction_count,
                       .read_only = config.read_only};
    session.init(nbd::host_backend::region_size(backend_options, workers), config.transaction_count,
                 workers);
    for (uint32_t i = 0; i < workers; ++i)
      session.add_worker(config.cpus[i],
                         {.slots = config.transaction_count,
                          .io_timeout = host::io_timeout_for(config.control_timeout())});
    session.wait_ready();
    session.start();
  } catch (const status_error& e) {
    // Ctrl-C before serving: the service still gets its shutdown.
    if (e.code() == status::shutdown) {
      try {
        session.shutdown();
      } catch (const status_error& f) {
        ZC_LOG_WARN("shutdown: {}", f.what());
      }
    }
    throw;
  }

  bool lost = false;
  {
    nbd::host_backend backend(session, backend_options);
    nbd::server server(backend,
                       {.export_name = config.export_name,
                        .tls = config.tls(),
                        .tls_keys = config.tls_keys,
                        .read_only = config.read_only,
                        .max_connections = config.max_connections,
                        .request_timeout = std::chrono::seconds(config.request_timeout_seconds),
                        .idle_timeout = std::chrono::seconds(config.idle_timeout_seconds),
                        .drain_timeout = 2 * config.control_timeout()});
    for (int i = 0; i < config.systemd_listeners; ++i) server.adopt_listener(3 + i);
    if (!config.socket.empty()) server.listen_unix(config.socket);
    uint16_t port = 0;
    if (!config.listen.empty()) {
      auto where = storage::parse_ipv4_endpoint(config.listen);
      port = server.listen_tcp(where);
      where.port = port;
      ZC_LOG_INFO("serving NBD on {}", where.to_string());
    }
    if (!config.socket.empty()) ZC_LOG_INFO("serving NBD on {}", config.socket);
    if (config.systemd_listeners != 0)
      ZC_LOG_INFO("serving NBD on {} socket(s) from systemd", config.systemd_listeners);
    ZC_LOG_INFO("export '{}': {} bytes in blocks of {}, {}", config.export_name, backend.size(),
                backend.block_size(), backend.read_only() ? "read-only" : "read-write");
    if (config.tls() != nbd::tls_mode::off)
      ZC_LOG_INFO("TLS {} (pre-shared keys of {})",
                  config.tls() == nbd::tls_mode::require ? "required" : "offered",
                  config.tls_psk_path);

    std::exception_ptr server_failure;
    std::thread serving([&] {
      try {
        server.run();
      } catch (...) {
        server_failure = std::current_exception();
        core::request_stop();  // nothing is served any more: the program ends and says why
      }
    });
    while (!core::stop_requested() && !lost) {
      if (status s = session.watch(watch_slice); !ok(s)) {
        ZC_LOG_ERROR("lost the service ({}): requests fail with EIO from now on", status_name(s));
        lost = true;
        break;
      }
      // A worker whose IO went unanswered past its deadline gave up on the service (it may still
      // act on those IOs): as for the initiator, the session is over.
      if (auto [why, w] = session.queue_failure(); w != nullptr) {
        ZC_LOG_ERROR("worker on cpu {} gave up on the service ({}): ending", w->cpu(),
                     status_name(why));
        lost = true;
      }
    }
    if (!lost) ZC_LOG_INFO("stop requested: finishing the requests in flight");
    server.stop();
    serving.join();
    const auto& c = server.counters();
    ZC_LOG_INFO("served {} connections, {} requests, {} IO errors", c.connections, c.requests,
                c.io_errors);
    if (config.tls() != nbd::tls_mode::off)
      ZC_LOG_INFO("TLS: {} sessions, {} failed handshakes", c.tls_sessions, c.tls_failures);
    if (server_failure) std::rethrow_exception(server_failure);
    if (!config.socket.empty()) ::unlink(config.socket.c_str());
  }
  if (lost) {
    try {  // the service may be gone: what reaches it is a courtesy
      session.stop();
      session.shutdown();
    } catch (const status_error& e) {
      ZC_LOG_WARN("{}", e.what());
    }
    return 1;
  }
  session.stop();
  session.shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zc;
  // Under socket activation (nbdinfo -- [ zcstore_nbd ... ]) stdout belongs to the client.
  if (std::getenv("LISTEN_FDS") != nullptr) (void)::dup2(STDERR_FILENO, STDOUT_FILENO);
  core::print_banner(nbd_app::program_name, ZC_VERSION_STRING);
  nbd_app::nbd_config config;
  if (auto code = nbd_app::parse_config(argc, argv, config)) return *code;
  nbd_app::print_config(config);
  core::install_stop_signal_handlers();
  return core::run_guarded(nbd_app::program_name, [&] { return run(config); });
}
