// zc::core::context, DOCA's doca_ctx: the state machine every engine (rdma, comch consumer and
// producer, accel engines) follows: idle -> starting -> running -> stopping -> idle. A context is
// attached to one progress engine for its whole life and counts its tasks in flight, so that a
// stop completes (stopping -> idle) once the last of them has returned through its callback.
// Thread rules: owned by the thread of its progress engine.
#pragma once

#include <functional>
#include <string_view>

#include "core/progress_engine.hpp"
#include "core/task.hpp"

namespace zc::core {

enum class context_state { idle, starting, running, stopping };
std::string_view to_string(context_state s) noexcept;

class context : public event_source {
 public:
  using state_callback = std::function<void(context&, context_state previous, context_state next)>;

  explicit context(progress_engine& engine);
  ~context() override;
  context(const context&) = delete;
  context& operator=(const context&) = delete;

  // idle -> starting (or straight to running when there is nothing to wait for).
  status start();
  // running/starting -> stopping: in-flight tasks are flushed with errors, then idle.
  status stop();

  context_state state() const noexcept { return state_; }
  void set_state_changed_callback(state_callback cb) { on_state_changed_ = std::move(cb); }
  void set_user_data(user_data d) noexcept { user_data_ = d; }
  user_data get_user_data() const noexcept { return user_data_; }
  progress_engine& engine() const noexcept { return engine_; }
  uint32_t inflight() const noexcept { return inflight_; }

 protected:
  // Engine-specific start; returns the state to enter (starting or running) or throws.
  virtual context_state on_start() = 0;
  // Engine-specific stop: must complete (with an error) every task still in flight.
  virtual void on_stop() = 0;

  void set_state(context_state next);
  // Every submit that succeeds calls this once; the engine undoes it when the callback runs.
  void task_submitted() noexcept { ++inflight_; }
  // Queues a completion for `task` (its callback runs in the progress engine).
  void complete(task_base& task, status result) noexcept { engine_.complete(task, result); }

 private:
  friend class progress_engine;
  void task_finished() noexcept {
    if (inflight_ > 0) --inflight_;
  }
  void check_stopped() {
    if (state_ == context_state::stopping && inflight_ == 0) set_state(context_state::idle);
  }

  progress_engine& engine_;
  context_state state_ = context_state::idle;
  uint32_t inflight_ = 0;
  user_data user_data_{.u64 = 0};
  state_callback on_state_changed_;
};

}  // namespace zc::core
