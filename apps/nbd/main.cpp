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
#include <vector>

#include "core/cli.hpp"
#include "core/log.hpp"
#include "core/thread.hpp"
#include "host/session.hpp"
#include "nbd/host_backend.hpp"
#include "nbd/server.hpp"
#include "nbd/server_source.hpp"
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
    // Run to completion: one server per IO worker, polled by that worker's engine beside the
    // worker's queue; the first accepts and hands each connection to the next in turn.
    const auto& ws = session.workers();
    std::vector<std::unique_ptr<nbd::host_backend>> backends;
    std::vector<std::unique_ptr<nbd::server>> servers;
    std::vector<std::unique_ptr<nbd::server_source>> sources(workers);
    for (uint32_t i = 0; i < workers; ++i) {
      auto options = backend_options;
      options.worker = i;
      backends.push_back(std::make_unique<nbd::host_backend>(session, options));
      servers.push_back(std::make_unique<nbd::server>(
          *backends.back(),
          nbd::server_options{
              .export_name = config.export_name,
              .tls = config.tls(),
              .tls_keys = config.tls_keys,
              .read_only = config.read_only,
              .max_connections = config.max_connections,
              .request_timeout = std::chrono::seconds(config.request_timeout_seconds),
              .idle_timeout = std::chrono::seconds(config.idle_timeout_seconds),
              .drain_timeout = 2 * config.control_timeout()}));
      sources[i] = std::make_unique<nbd::server_source>(*servers.back(), ws[i]->thread().engine());
    }
    nbd::server& acceptor = *servers.front();
    std::vector<nbd::server*> group;
    for (auto& s : servers) group.push_back(s.get());
    acceptor.share_accepts_with(group);
    for (int i = 0; i < config.systemd_listeners; ++i) acceptor.adopt_listener(3 + i);
    if (!config.socket.empty()) acceptor.listen_unix(config.socket);
    uint16_t port = 0;
    if (!config.listen.empty()) {
      auto where = storage::parse_ipv4_endpoint(config.listen);
      port = acceptor.listen_tcp(where);
      where.port = port;
      ZC_LOG_INFO("serving NBD on {}", where.to_string());
    }
    if (!config.socket.empty()) ZC_LOG_INFO("serving NBD on {}", config.socket);
    if (config.systemd_listeners != 0)
      ZC_LOG_INFO("serving NBD on {} socket(s) from systemd", config.systemd_listeners);
    const auto& storage = *backends.front();
    ZC_LOG_INFO("export '{}': {} bytes in blocks of {}, {}; served on {} worker thread(s)",
                config.export_name, storage.size(), storage.block_size(),
                storage.read_only() ? "read-only" : "read-write", workers);
    if (config.tls() != nbd::tls_mode::off)
      ZC_LOG_INFO("TLS {} (pre-shared keys of {})",
                  config.tls() == nbd::tls_mode::require ? "required" : "offered",
                  config.tls_psk_path);

    for (uint32_t i = 0; i < workers; ++i)
      ws[i]->thread().call([&, i] {
        ws[i]->thread().engine().attach(*sources[i]);
        backends[i]->set_completion_source(sources[i].get());
      });
    std::exception_ptr server_failure;
    while (!core::stop_requested() && !lost && !server_failure) {
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
      // A server that failed serves nothing more: the program ends and says why.
      for (auto& src : sources)
        if (!server_failure && src->failure()) server_failure = src->failure();
    }
    if (!lost && !server_failure) ZC_LOG_INFO("stop requested: finishing the requests in flight");
    for (auto& s : servers) s->stop();
    // The drain is bounded by the server itself (drain_timeout); the margin is for a busy thread.
    const auto drain_limit = 2 * config.control_timeout() + 10s;
    bool drained = true;
    for (uint32_t i = 0; i < workers; ++i) {
      nbd::server_source* src = sources[i].get();
      if (!ws[i]->thread().wait_until([src] { return src->finished(); }, drain_limit)) {
        ZC_LOG_ERROR("the NBD server on cpu {} did not finish in time", ws[i]->cpu());
        drained = false;
        break;
      }
      if (!server_failure && src->failure()) server_failure = src->failure();
      ws[i]->thread().call([&, i] {
        backends[i]->set_completion_source(nullptr);
        ws[i]->thread().engine().detach(*sources[i]);
      });
    }
    if (!drained) {
      // Still attached to a worker that may poll them: they are left, and the program ends.
      for (auto& s : sources) (void)s.release();
      for (auto& s : servers) (void)s.release();
      for (auto& b : backends) (void)b.release();
      throw status_error(status::time_out, "the NBD server did not drain");
    }
    nbd::server_counters c;
    std::string per_worker;  // connections served by each worker thread
    for (auto& s : servers) {
      const auto& k = s->counters();
      per_worker += fmt::format("{}{}", per_worker.empty() ? "" : ", ", k.connections);
      c.connections += k.connections;
      c.refused += k.refused;
      c.timed_out += k.timed_out;
      c.requests += k.requests;
      c.io_errors += k.io_errors;
      c.tls_sessions += k.tls_sessions;
      c.tls_failures += k.tls_failures;
    }
    ZC_LOG_INFO("served {} connections, {} requests, {} IO errors", c.connections, c.requests,
                c.io_errors);
    if (workers > 1) ZC_LOG_INFO("connections per worker thread: {}", per_worker);
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
