#include "core/context.hpp"

#include "core/log.hpp"

namespace zc::core {

std::string_view to_string(context_state s) noexcept {
  switch (s) {
    case context_state::idle:
      return "idle";
    case context_state::starting:
      return "starting";
    case context_state::running:
      return "running";
    case context_state::stopping:
      return "stopping";
  }
  return "?";
}

context::context(progress_engine& engine) : engine_(engine) {
  engine_.attach(*this);
}

context::~context() {
  // Completions still queued point into tasks that die with this context.
  engine_.forget(*this);
  engine_.detach(*this);
}

status context::start() {
  if (state_ != context_state::idle) return status::bad_state;
  set_state(on_start());
  return status::success;
}

status context::stop() {
  if (state_ == context_state::idle) return status::success;
  if (state_ == context_state::stopping) return status::in_progress;
  set_state(context_state::stopping);
  on_stop();
  check_stopped();
  return status::success;
}

void context::set_state(context_state next) {
  if (next == state_) return;
  context_state previous = state_;
  state_ = next;
  ZC_SDK_LOG_DEBUG("context {}: {} -> {}", static_cast<void*>(this), to_string(previous),
                   to_string(next));
  if (on_state_changed_) on_state_changed_(*this, previous, next);
}

}  // namespace zc::core
