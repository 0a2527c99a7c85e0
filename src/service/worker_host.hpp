// The control thread's side of a service worker (zero-copy, gga): the worker's engine thread, the
// engine-thread half it owns (IoPath), and the bounded steps every service takes with it at
// start and stop: readiness, start serving, drain the IOs in flight, stop the rdma contexts,
// close the comch producer and consumer. IoPath provides ready(), start_serving(consumer),
// stop_serving(), in_flight(), stop_rdma(), rdma_stopped(), stop_comch(), comch_stopped() and
// rdma_lost() (the last one from any thread); the rest runs on the engine thread.
// Thread rules: every method from the control thread; instantiated where IoPath is complete.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <utility>
#include <vector>

#include "core/engine_owned.hpp"
#include "core/engine_thread.hpp"
#include "core/log.hpp"

namespace zc::service {

// How long the control thread waits for a worker.
struct worker_limits {
  std::chrono::milliseconds command{10000};  // building, connecting, each command
  std::chrono::milliseconds drain{5000};     // at stop: IOs in flight, then the contexts
};

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
  void start_data_path(uint32_t host_consumer_id) {
    call([host_consumer_id](IoPath& io) { io.start_serving(host_consumer_id); });
  }
  // Stops taking IOs from the host and lets those in flight finish (bounded).
  void drain() {
    if (drained_) return;
    drained_ = true;
    call([](IoPath& io) { io.stop_serving(); });
    IoPath* io = io_.get();
    if (!thread_.wait_until([io] { return io->in_flight() == 0; }, limits_.drain))
      ZC_LOG_ERROR("worker {}: IOs still in flight after {} ms", cpu_, limits_.drain.count());
  }
  // drain(), then stops the rdma contexts (bounded).
  void stop() {
    drain();
    call([](IoPath& io) { io.stop_rdma(); });
    IoPath* io = io_.get();
    if (!thread_.wait_until([io] { return io->rdma_stopped(); }, limits_.drain))
      ZC_LOG_ERROR("worker {}: rdma connections not stopped after {} ms", cpu_,
                   limits_.drain.count());
  }
  // Stops the comch producer and consumer (the host sees the consumer expire), bounded.
  void close_comch() {
    call([](IoPath& io) { io.stop_comch(); });
    IoPath* io = io_.get();
    if (!thread_.wait_until([io] { return io->comch_stopped(); }, limits_.drain))
      ZC_LOG_ERROR("worker {}: comch producer/consumer not stopped after {} ms", cpu_,
                   limits_.drain.count());
  }
  bool rdma_lost() const noexcept { return io_ && io_->rdma_lost(); }
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

// Stops every worker (each bounded) and collects its stats into `out` (cleared first), in worker
// order; a worker whose stop or stats throws is logged and counted as one error. Returns the
// errors of all workers. Stats: a struct with cpu, operations and errors.
template <typename Workers, typename Stats>
uint64_t stop_and_collect(Workers& workers, std::vector<Stats>& out) noexcept {
  uint64_t errors = 0;
  out.clear();
  for (auto& w : workers) {
    Stats s{};
    try {
      w->stop();
      s = w->stats();
    } catch (const std::exception& e) {
      ZC_LOG_ERROR("worker on cpu {}: {}", w->cpu(), e.what());
      s = Stats{};
      s.cpu = w->cpu();
      s.errors = 1;
    }
    errors += s.errors;
    if (s.errors != 0)
      ZC_LOG_ERROR("worker on cpu {}: {} operations, {} errors", s.cpu, s.operations, s.errors);
    out.push_back(s);
  }
  return errors;
}

}  // namespace zc::service
