#include "accel/internal/software_engine.hpp"

namespace zc::accel::internal {

void software_engine::reserve_queue(uint32_t capacity) {
  ring_.assign(capacity, entry{});
  head_ = 0;
  queued_ = 0;
}

status software_engine::enqueue(core::task_base& task, uint8_t kind) noexcept {
  if (state() != core::context_state::running) return status::bad_state;
  // Every task of every pool fits: a full ring means a task was submitted twice.
  if (queued_ == ring_.size()) return status::in_use;
  ring_[(head_ + queued_) % ring_.size()] = entry{&task, kind};
  ++queued_;
  task_submitted();
  return status::success;
}

size_t software_engine::poll() {
  // Only what was queued before this poll: callbacks that submit again run in the next one.
  const size_t count = queued_;
  for (size_t i = 0; i < count; ++i) {
    const entry e = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    --queued_;
    complete(*e.task, execute(*e.task, e.kind));
  }
  return count;
}

void software_engine::on_stop() {
  while (queued_ != 0) {
    const entry e = ring_[head_];
    head_ = (head_ + 1) % ring_.size();
    --queued_;
    complete(*e.task, status::shutdown);
  }
}

}  // namespace zc::accel::internal
