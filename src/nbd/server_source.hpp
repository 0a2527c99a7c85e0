// Run to completion: an NBD server polled by the progress engine of the IO worker whose backend it
// uses, so that one thread reads a request, submits its IO message, takes the completion and
// writes the reply. The engine sleeps on the server's epoll fd beside its own sources, and a
// completion asks for a server pass at the end of the engine's pass that delivered it. In event
// mode the server looks for events only in a pass after its fd woke the engine (or when it has
// work, a deadline has come, or a few passes went by without a look): every look is a system
// call, and a pass woken by the IO queue's completions has none to find.
//
//   nbd::server_source source(server, worker.thread().engine());
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
  server_source(server& s, core::progress_engine& engine) noexcept : server_(s), engine_(engine) {}

  size_t poll() override {
    if (engine_.mode() == core::poll_mode::event && !fd_ready_ && skipped_ < max_skipped &&
        !server_.work_pending() && engine_.pass_time() < server_.next_wake()) {
      ++skipped_;
      return 0;
    }
    fd_ready_ = false;
    skipped_ = 0;
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
  void fd_ready() override { fd_ready_ = true; }
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
  // Passes without a look at the server's events at most (an engine whose loop does not sleep in
  // wait() never reports its fd ready).
  static constexpr uint32_t max_skipped = 8;

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
  core::progress_engine& engine_;
  bool fd_ready_ = true;  // look at once after attach
  uint32_t skipped_ = 0;
  std::exception_ptr failure_;
  std::atomic<bool> finished_{false};
};

}  // namespace zc::nbd
