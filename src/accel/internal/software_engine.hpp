// The part every software accel engine shares: a context whose submitted tasks wait in a fixed
// queue (sized from the task pools at configure time) and run, synchronously and in order, in the
// next poll() of its progress engine; each then completes through the engine like any task. So a
// caller sees DOCA's model (submit now, callback inside progress()) and no work runs inside
// submit(). Thread rules: the thread of its progress engine.
#pragma once

#include <cstdint>
#include <vector>

#include "core/context.hpp"
#include "core/task.hpp"

namespace zc::accel::internal {

class software_engine : public core::context {
 public:
  size_t poll() override;
  // Work already queued: the engine must not sleep.
  bool arm() override { return queued_ == 0; }

 protected:
  explicit software_engine(core::progress_engine& engine) : core::context(engine) {}

  // Makes room for `capacity` queued tasks (the sum of the engine's pool sizes). Control path.
  void reserve_queue(uint32_t capacity);
  // Queues a task for the next poll(): bad_state when not running, success otherwise (the queue
  // holds every task of the pools, so it cannot be full).
  status enqueue(core::task_base& task, uint8_t kind) noexcept;
  // Runs one queued task; the status it returns completes the task.
  virtual status execute(core::task_base& task, uint8_t kind) noexcept = 0;

  core::context_state on_start() override { return core::context_state::running; }
  // Tasks still queued complete with status::shutdown, without running.
  void on_stop() override;

 private:
  struct entry {
    core::task_base* task = nullptr;
    uint8_t kind = 0;
  };
  std::vector<entry> ring_;
  size_t head_ = 0;
  size_t queued_ = 0;
};

}  // namespace zc::accel::internal
