// zc::core::engine_owned<T>: a T that lives on an engine_thread: built there, used there through
// the thread's jobs, destroyed there. Objects attached to a progress engine (contexts, their task
// pools, the buffers their tasks point at) must never be touched by another thread, not even by
// their destructor, and a bounded wait that gives up must not leave the engine thread building
// into memory its caller is about to free. So the build job owns what it builds and hands it over
// only while the caller still waits; a caller that gave up leaves the object to the job, which
// destroys it on the engine thread.
//
//   core::engine_thread thread_;          // declared first: it outlives the object
//   core::engine_owned<worker_state> state_ = core::engine_owned<worker_state>::build(
//       thread_, [cpu] { return std::make_unique<worker_state>(cpu); }, limit);
//   thread_.call([s = state_.get()] { s->start(); });
//
// Thread rules: build(), reset() and the destructor from any thread but the engine's. The
// engine_thread must outlive the engine_owned: its join is what waits for the destruction.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <utility>

#include "core/engine_thread.hpp"
#include "core/status.hpp"

namespace zc::core {

template <typename T>
class engine_owned {
 public:
  engine_owned() = default;
  engine_owned(engine_owned&& other) noexcept
      : thread_(other.thread_), object_(std::exchange(other.object_, nullptr)) {}
  engine_owned& operator=(engine_owned&& other) noexcept {
    if (this != &other) {
      reset();
      thread_ = other.thread_;
      object_ = std::exchange(other.object_, nullptr);
    }
    return *this;
  }
  engine_owned(const engine_owned&) = delete;
  engine_owned& operator=(const engine_owned&) = delete;
  ~engine_owned() { reset(); }

  // Runs make() (which returns std::unique_ptr<T>) on `thread` and waits at most `timeout` for it.
  // Throws what make() throws (what it had built is unwound on the engine thread), or
  // status_error(time_out); a build still running then is destroyed by the engine thread when it
  // finishes. make() may run after build() has returned: it must capture by value.
  template <typename Make>
  static engine_owned build(engine_thread& thread, Make make, std::chrono::milliseconds timeout) {
    struct handoff {
      std::mutex mutex;
      bool abandoned = false;
      std::unique_ptr<T> object;
    };
    auto h = std::make_shared<handoff>();
    try {
      thread.call(
          [h, make = std::move(make)]() mutable {
            std::unique_ptr<T> made = make();
            std::lock_guard lock(h->mutex);
            if (!h->abandoned) h->object = std::move(made);
            // Otherwise `made` dies here, on the engine thread.
          },
          timeout);
    } catch (const status_error& e) {
      if (e.code() != status::time_out) throw;
      std::lock_guard lock(h->mutex);
      // Finished between the deadline and now: as good as in time.
      if (!h->object) {
        h->abandoned = true;
        throw;
      }
    }
    engine_owned out;
    out.thread_ = &thread;
    out.object_ = h->object.release();
    return out;
  }

  // Posts the destruction to the engine thread and returns at once: jobs queued before it still
  // see the object, and the engine_thread's join waits for it.
  void reset() noexcept {
    T* object = std::exchange(object_, nullptr);
    if (object == nullptr) return;
    try {
      thread_->post([object] { delete object; });
    } catch (...) {
      // Out of memory for the job: leaking the object beats destroying it on the wrong thread.
    }
  }

  T* get() const noexcept { return object_; }
  T& operator*() const noexcept { return *object_; }
  T* operator->() const noexcept { return object_; }
  explicit operator bool() const noexcept { return object_ != nullptr; }

 private:
  engine_thread* thread_ = nullptr;
  T* object_ = nullptr;
};

}  // namespace zc::core
