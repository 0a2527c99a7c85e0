// zc::core::progress_engine, DOCA's doca_pe: one per thread. Contexts attach to it; progress()
// polls them once, then runs the callbacks of every task that completed. It never blocks.
// wait() sleeps the thread according to the poll mode: busy never sleeps, event sleeps in epoll
// on the sources' file descriptors, adaptive spins for a short window after the last hit and then
// sleeps (a wake-up costs 70-100 us in these VMs, see UCX_MEASURED.md section 6).
// Thread rules: everything but notify() is for the owning thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/task.hpp"

namespace zc::core {

enum class poll_mode { busy, adaptive, event };

using steady_clock = std::chrono::steady_clock;

// The clock for deadlines of milliseconds and more: steady_clock's timeline (CLOCK_MONOTONIC) as
// CLOCK_MONOTONIC_COARSE keeps it, which costs a memory read where steady_clock::now() reads the
// hardware clock (about 3 ns against 22 ns in these VMs). It lags steady_clock::now() by up to
// coarse_resolution() (one scheduler tick, 1-10 ms): a deadline kept on it is checked against it,
// and a sleep until such a deadline asks for one resolution more, so that it has surely passed.
steady_clock::time_point coarse_now() noexcept;
steady_clock::duration coarse_resolution() noexcept;

// Anything a progress engine polls: contexts and per-engine shared resources (a UCX worker).
class event_source {
 public:
  virtual ~event_source() = default;
  // Does the work that is ready and queues completions; returns how much it did (0 = nothing).
  virtual size_t poll() = 0;
  // A file descriptor that turns readable when poll() may have work; -1 if none. The engine reads
  // it again before each sleep, so it may appear after attach (contexts attach in their base
  // constructor, before an override can answer) or change.
  virtual int wait_fd() const { return -1; }
  // Called before sleeping on wait_fd(); false means work is already pending, do not sleep.
  virtual bool arm() { return true; }
  // The latest time poll() must run again (task deadlines, keep-alives).
  virtual steady_clock::time_point next_deadline() const { return steady_clock::time_point::max(); }
  // Runs once after the completion callbacks of a pass in which the source asked for it
  // (progress_engine::call_at_pass_end); returns how much it did, as poll() does.
  virtual size_t pass_end() { return 0; }
  // Runs when wait_fd() woke the engine from a sleep (poll_mode::event, and adaptive once it
  // sleeps). A source whose only work comes through that fd may then skip looking for it in the
  // passes between (the engine looks at every fd again before it sleeps).
  virtual void fd_ready() {}
};

class progress_engine {
 public:
  explicit progress_engine(poll_mode mode = poll_mode::adaptive);
  ~progress_engine();
  progress_engine(const progress_engine&) = delete;
  progress_engine& operator=(const progress_engine&) = delete;

  // Polls every source once and runs completion callbacks. True when anything happened (a hit).
  bool progress();

  // Sleeps until a source may have work, notify() is called, or `timeout` passes. Returns at once
  // in busy mode, and in adaptive mode within the spin window after the last hit.
  void wait(std::chrono::microseconds timeout);

  // progress()/wait() until done() is true or the timeout passes. Returns done().
  template <typename Done>
  bool run_until(Done&& done, std::chrono::milliseconds timeout) {
    const auto deadline = steady_clock::now() + timeout;
    while (!done()) {
      if (progress()) continue;
      const auto now = pass_time();
      if (now >= deadline) return done();
      wait(std::chrono::duration_cast<std::chrono::microseconds>(deadline - now));
    }
    return true;
  }

  // Wakes the owning thread from wait(). Safe from any thread and from signal handlers.
  void notify() noexcept;

  // For a caller that sleeps in its own poll/epoll loop instead of wait() (DOCA's
  // doca_pe_get_notification_handle): a file descriptor that turns readable when a source may
  // have work or notify() was called. Sources' deadlines do not wake it: such a caller bounds its
  // own sleep.
  int notification_fd() const noexcept { return epoll_fd_; }
  // Gets every source ready to make notification_fd() readable, as wait() does before sleeping;
  // false when work is already pending (the caller must not sleep).
  bool arm_sources() noexcept;
  // Consumes pending notify() calls and tells the sources whose fds are ready (fd_ready), so
  // that after the next progress() notification_fd() reads as idle again.
  void clear_notify() noexcept;

  // The time of this progress pass, for deadlines and periodic checks (which need no finer
  // grain): the clock is read at the first call in a pass and kept until the pass ends, so every
  // source of the engine shares one read, and a pass that times nothing reads no clock at all.
  steady_clock::time_point pass_time() noexcept {
    if (!pass_time_valid_) {
      pass_time_ = steady_clock::now();
      pass_time_valid_ = true;
    }
    return pass_time_;
  }

  // coarse_now(), read once per progress pass: every deadline set or checked inside one pass
  // (pollers, completion callbacks) shares one read; outside a pass it reads the clock.
  steady_clock::time_point coarse_time() noexcept {
    if (!in_pass_) return coarse_now();
    if (!coarse_valid_) {
      coarse_ = coarse_now();
      coarse_valid_ = true;
    }
    return coarse_;
  }

  uint64_t hits() const noexcept { return hits_; }
  uint64_t misses() const noexcept { return misses_; }
  poll_mode mode() const noexcept { return mode_; }
  // How long adaptive mode keeps spinning after the last hit.
  void set_spin_window(std::chrono::microseconds w) noexcept { spin_window_ = w; }

  void attach(event_source& source);
  void detach(event_source& source);

  // Calls source.pass_end() once at the end of this pass, after its last completion callbacks
  // (of the next pass when called outside one): for what must leave in the pass that made it
  // due, unless a callback of that pass did it on the way (an rdma acknowledgement, which a
  // caller that stops calling progress() must not hold back).
  void call_at_pass_end(event_source& source) { pass_end_.push_back(&source); }

  // Queues a finished task; its callback runs inside the next progress() (or the current one).
  void complete(task_base& task, status result) noexcept;
  // Drops queued completions of a context that is being destroyed (their tasks die with it).
  void forget(const class context& owner) noexcept;
  // Drops queued completions of the tasks of a pool that is being destroyed or reconfigured.
  void forget(const task_pool_base& pool) noexcept;

  // Per-engine shared object (one UCX worker per engine, say), made by `make` on first use.
  template <typename T>
  std::shared_ptr<T> shared(const void* key, const std::function<std::shared_ptr<T>()>& make) {
    auto it = shared_.find(key);
    if (it != shared_.end()) return std::static_pointer_cast<T>(it->second);
    auto made = make();
    shared_[key] = made;
    return made;
  }
  // The next shared(key) makes a new object; holders of the old one keep it until they let go.
  void forget_shared(const void* key) noexcept { shared_.erase(key); }

 private:
  size_t run_completions();
  size_t end_pass();
  template <typename Drop>
  void drop_queued(Drop drop) noexcept;
  // Brings the epoll registration of sources_[i] in line with its wait_fd(); false on failure.
  bool watch(size_t i) noexcept;
  // epoll_wait on the sources' set; tells each source whose fd is ready, consumes notify().
  void take_events(int timeout_ms) noexcept;

  poll_mode mode_;
  int epoll_fd_ = -1;
  int notify_fd_ = -1;
  std::vector<event_source*> sources_;
  std::vector<int> source_fds_;             // the fd registered in epoll for sources_[i], or -1
  std::vector<event_source*> pass_end_;     // asked for pass_end() (null: detached since)
  std::vector<event_source*> pass_ending_;  // those being called now
  task_base* completed_head_ = nullptr;
  task_base* completed_tail_ = nullptr;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
  steady_clock::time_point last_hit_{};
  steady_clock::time_point pass_time_{};
  bool pass_time_valid_ = false;
  steady_clock::time_point coarse_{};
  bool coarse_valid_ = false;
  bool in_pass_ = false;  // inside progress()
  std::chrono::microseconds spin_window_{200};
  std::unordered_map<const void*, std::shared_ptr<void>> shared_;
};

}  // namespace zc::core
