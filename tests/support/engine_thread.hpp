// Test helper: a progress engine driven by its own thread (event mode by default, so an idle
// test sleeps in epoll instead of spinning). Objects attached to the engine are created, used and
// destroyed on that thread through call(); wait_until() blocks the test thread, with a bound,
// until a condition evaluated on the engine thread holds.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/progress_engine.hpp"

namespace zc::test {

class engine_thread {
 public:
  explicit engine_thread(core::poll_mode mode = core::poll_mode::event) {
    std::promise<void> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, mode, &ready] {
      core::progress_engine engine(mode);
      engine_ = &engine;
      ready.set_value();
      loop();
      run_jobs();  // late jobs (typically destruction of objects) still run
      engine_ = nullptr;
    });
    started.wait();
  }

  ~engine_thread() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    if (engine_ != nullptr) engine_->notify();
    thread_.join();
  }

  core::progress_engine& engine() { return *engine_; }

  // Runs f on the engine thread and returns its result; throws if it takes longer than timeout.
  template <typename F>
  auto call(F&& f, std::chrono::milliseconds timeout = std::chrono::seconds(10)) -> decltype(f()) {
    using result = decltype(f());
    auto task = std::make_shared<std::packaged_task<result()>>(std::forward<F>(f));
    auto future = task->get_future();
    {
      std::lock_guard lock(mutex_);
      jobs_.emplace_back([task] { (*task)(); });
    }
    engine_->notify();
    if (future.wait_for(timeout) != std::future_status::ready)
      throw std::runtime_error("engine_thread::call timed out");
    return future.get();
  }

  // True once pred() (run on the engine thread after each progress pass) holds; false on timeout.
  bool wait_until(std::function<bool()> pred, std::chrono::milliseconds timeout) {
    auto done = std::make_shared<std::promise<void>>();
    auto future = done->get_future();
    call([&] { waiters_.push_back({std::move(pred), done}); });
    engine_->notify();
    bool ok = future.wait_for(timeout) == std::future_status::ready;
    if (!ok) call([&] { waiters_.remove_if([&](const waiter& w) { return w.done == done; }); });
    return ok;
  }

 private:
  struct waiter {
    std::function<bool()> pred;
    std::shared_ptr<std::promise<void>> done;
  };

  bool run_jobs() {
    std::deque<std::function<void()>> jobs;
    {
      std::lock_guard lock(mutex_);
      jobs.swap(jobs_);
    }
    for (auto& job : jobs) job();
    return !jobs.empty();
  }

  void loop() {
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (stopping_) return;
      }
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
  core::progress_engine* engine_ = nullptr;
  std::mutex mutex_;
  std::deque<std::function<void()>> jobs_;
  std::list<waiter> waiters_;
  bool stopping_ = false;
};

}  // namespace zc::test
