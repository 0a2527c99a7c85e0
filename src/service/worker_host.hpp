// The control thread's side of a service worker (zero-copy, gga): the worker's engine thread, the
// engine-thread half it owns (IoPath), and the bounded steps every service takes with it at
// start and stop: readiness, start serving, drain the IOs in flight, fence (stop the rdma
// contexts), answer what the target never answered, close the comch producer and consumer.
// IoPath provides ready(), start_serving(consumer), stop_serving(), in_flight(), stop_rdma(),
// rdma_stopped(), stop_comch(), comch_stopped(), optionally answer_held(status) and
// release_transport() (once fenced: the stopped contexts and their UCX worker go), and
// rdma_lost() (the last one from any thread); the rest runs on the engine thread.
// Thread rules: every method from the control thread; instantiated where IoPath is complete.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/engine_owned.hpp"
#include "core/engine_thread.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

namespace zc::service {

// A kind of data-path event of a worker (an error, a healed fault) logged once at its own level,
// then at debug level: a misbehaving peer cannot flood the log from the data path.
class log_first {
 public:
  explicit log_first(log::level first) noexcept : first_(first) {}
  void operator()(uint32_t cpu, const char* what, status s, const char* later) noexcept {
    if (seen_) {
      log::print(log::source::app, log::level::debug, "worker {}: {}: {}", cpu, what,
                 status_name(s));
      return;
    }
    seen_ = true;
    log::print(log::source::app, first_, "worker {}: {}: {} ({})", cpu, what, status_name(s),
               later);
  }

 private:
  log::level first_;
  bool seen_ = false;
};

// How long the control thread waits for a worker.
struct worker_limits {
  std::chrono::milliseconds command{10000};  // building, connecting, each command
  std::chrono::milliseconds drain{5000};     // at stop: IOs in flight, then the contexts
  // A relayed IO's (a step's) deadline at the target: the control timeout.
  std::chrono::milliseconds io{5000};
};

// The timeout model of a service, all from --control-timeout T: a control request, a relayed IO
// or a gga step the target leaves unanswered for T loses the target (fenced, then its IOs
// answered); the rdma layer's own task timeout is 2T, a backstop that the service's deadlines
// come before; a host gives up on the service after 2T (host::io_timeout_for).
inline std::chrono::milliseconds rdma_timeout_for(std::chrono::milliseconds io_deadline) {
  return 2 * io_deadline;
}

template <typename IoPath>
class worker_host {
 public:
  worker_host(uint32_t cpu, core::poll_mode mode, worker_limits limits)
      : cpu_(cpu), limits_(limits), thread_(mode, cpu) {}

  // Builds the IoPath on the engine thread (make() captures by value; see engine_owned).
  template <typename Make>
  void build(Make make) {
    io_ = core::engine_owned<IoPath>::build(thread_, std::move(make), limits_.command);
  }
  core::progress_engine& engine() { return thread_.engine(); }
  // Runs f(io) on the engine thread and returns its result (bounded).
  template <typename F>
  auto call(F f) {
    return thread_.call([io = io_.get(), f = std::move(f)] { return f(*io); }, limits_.command);
  }

  bool ready() {
    return call([](IoPath& io) { return io.ready(); });
  }
  // Until `deadline`: pred(io) holds, evaluated on the engine thread as it runs (no polling here).
  template <typename Pred>
  bool wait_for(Pred pred, core::steady_clock::time_point deadline) {
    IoPath* io = io_.get();
    return thread_.wait_until([io, pred] { return pred(*io); }, remaining(deadline));
  }
  void start_data_path(uint32_t host_consumer_id) {
    call([host_consumer_id](IoPath& io) { io.start_serving(host_consumer_id); });
  }
  // The steps below begin on every worker of a session before any is waited for, so a session
  // waits once for all of them (session_workers), never worker by worker.
  // Stops taking IOs from the host; requests that still arrive are answered, not relayed.
  void begin_drain();
  // Until `deadline`: the IOs in flight were answered, or `give_up()` holds (a lost target can
  // never answer them). give_up runs on the engine thread: it must read only atomics.
  bool wait_drained(core::steady_clock::time_point deadline, std::function<bool()> give_up);
  // Fences the target out of the host's memory: the rdma contexts stop.
  void begin_fence();
  bool wait_fenced(core::steady_clock::time_point deadline);
  // Once fenced: the IOs the target never answered are answered with `why`, and waited for.
  void answer_held(status why, core::steady_clock::time_point deadline);
  std::chrono::milliseconds drain_limit() const noexcept { return limits_.drain; }
  // Stops the comch producer and consumer (the host sees the consumer expire), bounded.
  void close_comch() {
    call([](IoPath& io) { io.stop_comch(); });
    IoPath* io = io_.get();
    if (!thread_.wait_until([io] { return io->comch_stopped(); }, limits_.drain))
      ZC_LOG_ERROR("worker {}: comch producer/consumer not stopped after {} ms", cpu_,
                   limits_.drain.count());
  }
  bool rdma_lost() const noexcept { return io_ && io_->rdma_lost(); }
  static std::chrono::milliseconds remaining(core::steady_clock::time_point deadline) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(deadline - core::steady_clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  }
  // For what IoPath publishes to any thread (atomics); null before build().
  const IoPath* io() const noexcept { return io_.get(); }

 private:
  uint32_t cpu_;
  worker_limits limits_;
  bool drained_ = false;
  core::engine_thread thread_;
  // Declared after thread_: destroyed first, by a job on thread_, which thread_'s join waits for.
  core::engine_owned<IoPath> io_;
};

// Out of the class and not inline, so that `extern template` keeps their instantiation in the
// worker's .cpp, where IoPath is complete.
template <typename IoPath>
void worker_host<IoPath>::begin_drain() {
  if (drained_) return;
  drained_ = true;
  call([](IoPath& io) { io.stop_serving(); });
}

template <typename IoPath>
bool worker_host<IoPath>::wait_drained(core::steady_clock::time_point deadline,
                                       std::function<bool()> give_up) {
  IoPath* io = io_.get();
  return thread_.wait_until(
      [io, give_up = std::move(give_up)] { return io->in_flight() == 0 || give_up(); },
      remaining(deadline));
}

// Posted, not called: stopping a context against a stalled peer waits for its goodbye and close
// (the rdma layer bounds each), and every worker's fence runs at the same time.
template <typename IoPath>
void worker_host<IoPath>::begin_fence() {
  thread_.post([io = io_.get()] { io->stop_rdma(); });
}

template <typename IoPath>
bool worker_host<IoPath>::wait_fenced(core::steady_clock::time_point deadline) {
  IoPath* io = io_.get();
  if (!thread_.wait_until([io] { return io->rdma_stopped(); }, remaining(deadline))) return false;
  if constexpr (requires(IoPath & p) { p.release_transport(); })
    call([](IoPath& p) { p.release_transport(); });
  return true;
}

template <typename IoPath>
void worker_host<IoPath>::answer_held(status why, core::steady_clock::time_point deadline) {
  if constexpr (requires(IoPath & io) { io.answer_held(why); })
    call([why](IoPath& io) { io.answer_held(why); });
  IoPath* io = io_.get();
  if (!thread_.wait_until([io] { return io->in_flight() == 0; }, remaining(deadline)))
    ZC_LOG_ERROR("worker {}: failed IOs not answered to the host in time", cpu_);
}

// Ends this process at once: the session could not fence a target out of the host's memory (its
// rdma contexts did not stop, or a transfer still holds the host's pages), and neither answering
// the host's IOs nor leaving them to expire is safe while a transfer may still land. A process
// that is gone is fenced: the host sees the connection reset once nothing here can write.
[[noreturn]] void end_process_unfenced(const std::string& why) noexcept;

// Runs f(*worker) on every worker, in order; one that throws is logged and the others still get
// their turn (stop and teardown must reach every worker). Workers: unique_ptrs to workers with
// cpu().
template <typename Workers, typename F>
void for_each_worker(Workers& workers, F f) noexcept {
  for (auto& w : workers) {
    try {
      f(*w);
    } catch (const std::exception& e) {
      ZC_LOG_ERROR("worker on cpu {}: {}", w->cpu(), e.what());
    }
  }
}

}  // namespace zc::service
