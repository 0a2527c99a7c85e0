// The workers of one service session (zero-copy, gga) and the steps every session takes with
// them: start their data paths once the client's consumers are there, drain, stop them once and
// keep their stats, close their comch endpoints, tear them down. Their stats outlive them.
// Also: the target failures that end a session, as session_lost.
// Thread rules: the control thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "service/client_session.hpp"
#include "service/target_set.hpp"
#include "service/worker_host.hpp"

namespace zc::service {

// Runs f() against the targets; a lost target or a stop request becomes session_lost (the
// session cannot go on), any other failure passes through for the loop to answer.
template <typename F>
auto on_targets(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const target_lost& e) {
    throw session_lost(e.code(), e.what());
  } catch (const status_error& e) {
    if (e.code() == status::shutdown) throw session_lost(e.code(), e.what());
    throw;
  }
}

// Worker: zero_copy_worker or gga_worker. Stats: a struct with cpu, operations and errors.
template <typename Worker, typename Stats>
class session_workers {
 public:
  bool empty() const noexcept { return workers_.empty(); }
  size_t size() const noexcept { return workers_.size(); }
  bool started() const noexcept { return started_; }
  bool stopped() const noexcept { return stopped_; }
  Worker& add(std::unique_ptr<Worker> w) {
    workers_.push_back(std::move(w));
    return *workers_.back();
  }
  auto begin() const noexcept { return workers_.begin(); }
  auto end() const noexcept { return workers_.end(); }

  // Waits, within `timeout`, for one client consumer per worker and every worker's endpoints
  // running, then starts each data path towards its consumer (the pairing rule).
  void start(client_link& client, std::chrono::milliseconds timeout) {
    const std::vector<uint32_t> ids = await_client_consumers(
        client, workers_.size(),
        [this] {
          for (auto& w : workers_)
            if (!w->ready()) return false;
          return true;
        },
        timeout);
    // Started before the first data path runs: a failure part way through still stops (fences)
    // the ones that run.
    started_ = true;
    for (size_t i = 0; i < workers_.size(); ++i) workers_[i]->start_data_path(ids[i]);
  }
  // Every worker stops taking IOs; then one wait, bounded by the drain limit, for all of them to
  // answer what they have in flight. It ends early once a target is lost: a target that failed
  // can never answer, and its IOs are answered after the fence instead.
  // True when every worker answered all it had in flight.
  bool drain() noexcept {
    if (workers_.empty()) return true;
    for_each_worker(workers_, [](Worker& w) { w.steps().begin_drain(); });
    const auto deadline = core::steady_clock::now() + workers_.front()->steps().drain_limit();
    std::vector<const Worker*> all;
    for (auto& w : workers_) all.push_back(w.get());
    auto lost = [all] {
      for (const Worker* w : all)
        if (w->rdma_lost()) return true;
      return false;
    };
    bool drained = true;
    for_each_worker(workers_, [&](Worker& w) {
      if (w.steps().wait_drained(deadline, lost)) return;
      drained = false;
      if (!lost())
        ZC_LOG_ERROR("worker on cpu {}: IOs still in flight after the drain limit", w.cpu());
    });
    return drained;
  }
  // The fence: every rdma context stops and `memory_fenced()` (the host's pages are out of every
  // transfer's reach) holds, within one drain limit (plus the rdma layer's goodbye allowance).
  // False when it did not complete: the caller must not touch the held IOs then.
  template <typename MemoryFenced>
  bool fence(MemoryFenced memory_fenced) noexcept {
    if (workers_.empty()) return true;
    for_each_worker(workers_, [](Worker& w) { w.steps().begin_fence(); });
    const auto deadline =
        core::steady_clock::now() + workers_.front()->steps().drain_limit() + fence_allowance;
    bool fenced = true;
    for_each_worker(workers_, [&](Worker& w) {
      if (!w.steps().wait_fenced(deadline)) {
        ZC_LOG_ERROR("worker on cpu {}: rdma connections not stopped in time", w.cpu());
        fenced = false;
      }
    });
    while (fenced && !memory_fenced()) {
      if (core::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return fenced;
  }

  // Stops every worker, once: drain(), then fence(), and only then are the IOs a target never
  // answered answered with connection_reset. A fence that does not complete ends the process
  // (end_process_unfenced). Keeps each worker's stats and errors.
  template <typename MemoryFenced>
  void stop(MemoryFenced memory_fenced) noexcept {
    if (workers_.empty() || stopped_) return;
    stopped_ = true;
    drain();
    if (!fence(memory_fenced))
      end_process_unfenced("a target's transfers could not be fenced off the host");
    const auto answered_by = core::steady_clock::now() + workers_.front()->steps().drain_limit();
    for_each_worker(
        workers_, [&](Worker& w) { w.steps().answer_held(status::connection_reset, answered_by); });
    stats_.clear();
    for (auto& w : workers_) {
      Stats s{};
      try {
        s = w->stats();
      } catch (const std::exception& e) {
        ZC_LOG_ERROR("worker on cpu {}: {}", w->cpu(), e.what());
        s.cpu = w->cpu();
        s.errors = 1;
      }
      errors_ += s.errors;
      if (s.errors != 0)
        ZC_LOG_ERROR("worker on cpu {}: {} operations, {} errors", s.cpu, s.operations, s.errors);
      stats_.push_back(s);
    }
  }
  // The host sees the workers' consumers expire.
  void close_comch() noexcept {
    for_each_worker(workers_, [](Worker& w) { w.close_comch(); });
  }
  // close_comch(), then the workers are gone; their stats stay. Call stop() first when
  // started(): clear() cannot fence.
  void clear() noexcept {
    started_ = false;
    close_comch();
    workers_.clear();
    stopped_ = false;
  }

  const std::vector<Stats>& stats() const noexcept { return stats_; }
  uint64_t errors() const noexcept { return errors_; }

 private:
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<Stats> stats_;
  bool started_ = false;
  bool stopped_ = false;
  uint64_t errors_ = 0;
  // What the fence may take beyond the drain limit: an rdma stop that says goodbye and closes its
  // endpoint (bounded in the rdma layer well below this).
  static constexpr std::chrono::milliseconds fence_allowance{2000};
};

}  // namespace zc::service
