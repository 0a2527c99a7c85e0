// zc::core::engine_thread: a thread that owns a progress engine, optionally pinned to a core (a
// program's worker, the reference's per-core thread). Objects attached to the engine are created,
// used and destroyed on that thread through call(); wait_until() blocks the caller, with a bound,
// until a condition evaluated on the engine thread holds; post() hands it a job without waiting.
// Between jobs the thread drives the engine, sleeping according to its poll mode.
// Thread rules: call(), post(), wait_until() and the destructor from any other thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include <optional>

#include "core/progress_engine.hpp"
#include "core/status.hpp"
#include "core/thread.hpp"

namespace zc::core {

class engine_thread {
 public:
  // Throws status_error if the thread cannot be pinned to `cpu`.
  explicit engine_thread(poll_mode mode = poll_mode::event, std::optional<uint32_t> cpu = {}) {
    std::promise<void> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, mode, cpu, &ready] {
      try {
        if (cpu) pin_current_thread(*cpu);
      } catch (...) {
        ready.set_exception(std::current_exception());
        return;
      }
      progress_engine engine(mode);
      engine_ = &engine;
      ready.set_value();
      loop();
      run_jobs();  // late jobs (typically destruction of objects) still run
      // Under mutex_, so no other thread is inside notify() when the engine goes away.
      std::lock_guard lock(mutex_);
      engine_ = nullptr;
    });
    try {
      started.get();
    } catch (...) {
      thread_.join();
      throw;
    }
  }

  ~engine_thread() {
    {
      // engine_ is read under the lock that the thread takes to clear it on its way out.
      std::lock_guard lock(mutex_);
      stopping_.store(true, std::memory_order_release);
      if (engine_ != nullptr) engine_->notify();
    }
    thread_.join();
  }

  progress_engine& engine() { return *engine_; }

  // Runs f on the engine thread and returns its result (or rethrows its exception). Throws
  // status_error(time_out) if it has not finished within `timeout`: a job that had not started is
  // withdrawn; one that had started keeps running, so what it refers to must outlive the thread.
  template <typename F>
  auto call(F&& f, std::chrono::milliseconds timeout = std::chrono::seconds(10)) -> decltype(f()) {
    using result = decltype(f());
    auto task = std::make_shared<std::packaged_task<result()>>(std::forward<F>(f));
    auto future = task->get_future();
    auto state = std::make_shared<std::atomic<int>>(job_queued);
    enqueue({[task] { (*task)(); }, state});
    if (future.wait_for(timeout) != std::future_status::ready) {
      int queued = job_queued;
      state->compare_exchange_strong(queued, job_withdrawn);
      throw status_error(status::time_out, "worker thread did not answer in time");
    }
    return future.get();
  }

  // Runs f on the engine thread and returns at once. Never withdrawn: a job posted before the
  // destructor still runs before the thread ends, so a destructor can post the destruction of
  // engine-thread objects and let the join wait for it. f must not throw.
  void post(std::function<void()> f) {
    enqueue({std::move(f), std::make_shared<std::atomic<int>>(job_queued)});
  }

  // True once pred() (run on the engine thread after each progress pass) holds; false on timeout.
  // A wait that gives up withdraws pred with a posted job, so pred is gone before anything posted
  // later runs (such as the destruction of what it looks at), even when the engine thread is too
  // busy to confirm the withdrawal in time; until then pred may still run, so it should capture
  // by value what it needs.
  bool wait_until(std::function<bool()> pred, std::chrono::milliseconds timeout) {
    auto done = std::make_shared<std::promise<void>>();
    auto future = done->get_future();
    post([this, pred = std::move(pred), done]() mutable {
      waiters_.push_back({std::move(pred), done});
    });
    if (future.wait_for(timeout) == std::future_status::ready) return true;
    auto removed = std::make_shared<std::promise<void>>();
    auto confirmed = removed->get_future();
    post([this, done, removed] {
      waiters_.remove_if([&](const waiter& w) { return w.done == done; });
      removed->set_value();
    });
    (void)confirmed.wait_for(withdraw_limit);
    return false;
  }

 private:
  // How long a wait_until() that gave up waits for its predicate's withdrawal to be confirmed.
  static constexpr std::chrono::seconds withdraw_limit{10};
  static constexpr int job_queued = 0;
  static constexpr int job_started = 1;
  static constexpr int job_withdrawn = 2;
  struct job {
    std::function<void()> run;
    std::shared_ptr<std::atomic<int>> state;
  };
  struct waiter {
    std::function<bool()> pred;
    std::shared_ptr<std::promise<void>> done;
  };

  void enqueue(job j) {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(j));
    jobs_pending_.store(true, std::memory_order_release);
    if (engine_ != nullptr) engine_->notify();
  }

  // Every pass of a busy worker comes here: with no job queued it costs one atomic load, no lock
  // and no allocation (running_ keeps its capacity from pass to pass).
  bool run_jobs() {
    if (!jobs_pending_.load(std::memory_order_acquire)) return false;
    {
      std::lock_guard lock(mutex_);
      running_.swap(jobs_);
      jobs_pending_.store(false, std::memory_order_relaxed);
    }
    for (auto& j : running_) {
      int queued = job_queued;
      if (j.state->compare_exchange_strong(queued, job_started)) j.run();
    }
    const bool ran = !running_.empty();
    running_.clear();
    return ran;
  }

  void loop() {
    while (!stopping_.load(std::memory_order_acquire)) {
      bool busy = run_jobs();
      busy |= engine_->progress();
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (it->pred()) {
          it->done->set_value();
          it = waiters_.erase(it);
          busy = true;
        } else {
          ++it;
        }
      }
      if (!busy) engine_->wait(std::chrono::milliseconds(100));
    }
  }

  std::thread thread_;
  progress_engine* engine_ = nullptr;  // set before the constructor returns; cleared under mutex_
  std::mutex mutex_;
  std::vector<job> jobs_;                  // queued by call(), under mutex_
  std::vector<job> running_;               // the engine thread's: swapped with jobs_ to run them
  std::atomic<bool> jobs_pending_{false};  // jobs_ is not empty; written under mutex_
  std::list<waiter> waiters_;
  std::atomic<bool> stopping_{false};
};

}  // namespace zc::core
