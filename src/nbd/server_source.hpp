// Run to completion: an NBD server polled by the progress engine of the IO worker whose backend it
// uses, so that one thread reads a request, submits its IO message, takes the completion and
// writes the reply. The engine sleeps on the server's epoll fd beside its own sources, and a
// completion asks for a server pass at the end of the engine's pass that delivered it.
//
//   nbd::server_source source(server);
//   worker.thread().call([&] { worker.thread().engine().attach(source); });
//   ... server.stop(); worker.thread().wait_until([&] { return source.finished(); }, limit);
//   worker.thread().call([&] { worker.thread().engine().detach(source); });
//
// Thread rules: attach, detach and the engine's calls on the engine's thread; finished() and
// failure() from any thread.
#pragma once

#include <atomic>
#include <exception>

#include "core/progress_engine.hpp"
#include "nbd/server.hpp"

namespace zc::nbd {

class server_source final : public core::event_source {
 public:
  explicit server_source(server& s) noexcept : server_(s) {}

  size_t poll() override {
    return guarded([this] {
      const auto r = server_.step(0);
      if (!r.serving) finished_.store(true, std::memory_order_release);
      return r.busy;
    });
  }
  // After the completions of the engine's pass: the replies they make go out in the same pass,
  // without reading events again.
  size_t pass_end() override {
    return guarded([this] { return server_.serve_completions(); });
  }
  int wait_fd() const override { return finished() ? -1 : server_.event_fd(); }
  core::steady_clock::time_point next_deadline() const override {
    return finished() ? core::steady_clock::time_point::max() : server_.next_wake();
  }

  // The server has drained after stop(), or failed: it serves nothing more.
  bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }
  // Why the server stopped serving on its own (null after a stop()).
  std::exception_ptr failure() const noexcept {
    return finished() ? failure_ : std::exception_ptr();
  }

 private:
  // A server that throws serves nothing more: the owner finds why in failure().
  template <typename Pass>
  size_t guarded(Pass pass) noexcept {
    if (finished_.load(std::memory_order_relaxed)) return 0;
    try {
      return pass() ? 1 : 0;
    } catch (...) {
      failure_ = std::current_exception();
      finished_.store(true, std::memory_order_release);
      return 1;
    }
  }

  server& server_;
  std::exception_ptr failure_;
  std::atomic<bool> finished_{false};
};

}  // namespace zc::nbd
