// The workers of one service session (zero-copy, gga) and the steps every session takes with
// them: start their data paths once the client's consumers are there, drain, stop them once and
// keep their stats, close their comch endpoints, tear them down. Their stats outlive them.
// Also: the target failures that end a session, as session_lost.
// Thread rules: the control thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
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
    for (size_t i = 0; i < workers_.size(); ++i) workers_[i]->start_data_path(ids[i]);
    started_ = true;
  }
  // Every worker stops taking IOs and lets those in flight finish (each bounded).
  void drain() noexcept {
    for_each_worker(workers_, [](Worker& w) { w.drain(); });
  }
  // Stops every worker, once, and keeps its stats and errors.
  void stop() noexcept {
    if (workers_.empty() || stopped_) return;
    stopped_ = true;
    errors_ += stop_and_collect(workers_, stats_);
  }
  // The host sees the workers' consumers expire.
  void close_comch() noexcept {
    for_each_worker(workers_, [](Worker& w) { w.close_comch(); });
  }
  // stop() when started, close_comch(), then the workers are gone; their stats stay.
  void clear() noexcept {
    if (started_) stop();
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
};

}  // namespace zc::service
