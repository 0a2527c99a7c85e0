#include "core/progress_engine.hpp"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/context.hpp"
#include "core/log.hpp"

namespace zc::core {

namespace {
steady_clock::duration from_timespec(const timespec& ts) {
  return std::chrono::duration_cast<steady_clock::duration>(std::chrono::seconds(ts.tv_sec) +
                                                            std::chrono::nanoseconds(ts.tv_nsec));
}
}  // namespace

steady_clock::time_point coarse_now() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return steady_clock::time_point(from_timespec(ts));
}

steady_clock::duration coarse_resolution() noexcept {
  static const steady_clock::duration resolution = [] {
    timespec ts{};
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0)
      return steady_clock::duration(std::chrono::milliseconds(10));
    return from_timespec(ts);
  }();
  return resolution;
}

progress_engine::progress_engine(poll_mode mode) : mode_(mode) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  notify_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || notify_fd_ < 0)
    throw status_error(status::operating_system, "progress engine: cannot create epoll/eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, notify_fd_, &ev);
}

progress_engine::~progress_engine() {
  shared_.clear();
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (notify_fd_ >= 0) close(notify_fd_);
}

bool progress_engine::watch(size_t i) noexcept {
  const int fd = sources_[i]->wait_fd();
  if (fd == source_fds_[i]) return true;
  if (source_fds_[i] >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, source_fds_[i], nullptr);
  source_fds_[i] = -1;
  if (fd < 0) return true;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = sources_[i];
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0 && errno != EEXIST) return false;
  source_fds_[i] = fd;
  return true;
}

void progress_engine::attach(event_source& source) {
  sources_.push_back(&source);
  source_fds_.push_back(-1);
  if (!watch(sources_.size() - 1))
    throw status_error(status::operating_system, "progress engine: epoll_ctl failed");
}

void progress_engine::detach(event_source& source) {
  for (auto* list : {&pass_end_, &pass_ending_})
    std::replace(list->begin(), list->end(), &source, static_cast<event_source*>(nullptr));
  // The fd that was registered, not wait_fd(): a context detaches from its base destructor,
  // where the override no longer answers.
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (sources_[i] != &source) continue;
    if (source_fds_[i] >= 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, source_fds_[i], nullptr);
    sources_.erase(sources_.begin() + static_cast<std::ptrdiff_t>(i));
    source_fds_.erase(source_fds_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
}

void progress_engine::complete(task_base& task, status result) noexcept {
  task.status_ = result;
  task.next_ = nullptr;
  if (completed_tail_ != nullptr) {
    completed_tail_->next_ = &task;
  } else {
    completed_head_ = &task;
  }
  completed_tail_ = &task;
}

void progress_engine::forget(const context& owner) noexcept {
  drop_queued([&](const task_base& t) { return t.context_ == &owner; });
}

void progress_engine::forget(const task_pool_base& pool) noexcept {
  drop_queued([&](const task_base& t) { return t.pool_ == &pool; });
}

void internal::forget_queued(const task_pool_base& pool, const context& owner) noexcept {
  owner.engine().forget(pool);
}

template <typename Drop>
void progress_engine::drop_queued(Drop drop) noexcept {
  task_base* kept_head = nullptr;
  task_base* kept_tail = nullptr;
  for (task_base* t = completed_head_; t != nullptr;) {
    task_base* next = t->next_;
    if (!drop(*t)) {
      t->next_ = nullptr;
      (kept_tail != nullptr ? kept_tail->next_ : kept_head) = t;
      kept_tail = t;
    }
    t = next;
  }
  completed_head_ = kept_head;
  completed_tail_ = kept_tail;
}

size_t progress_engine::run_completions() {
  size_t ran = 0;
  while (completed_head_ != nullptr) {
    task_base* task = completed_head_;
    completed_head_ = task->next_;
    if (completed_head_ == nullptr) completed_tail_ = nullptr;
    task->next_ = nullptr;
    context* owner = task->context_;
    owner->task_finished();
    task->pool_->dispatch(*task);
    owner->check_stopped();
    ++ran;
  }
  return ran;
}

size_t progress_engine::end_pass() {
  size_t done = 0;
  pass_ending_.swap(pass_end_);
  for (event_source* source : pass_ending_)
    if (source != nullptr) done += source->pass_end();
  pass_ending_.clear();
  return done;
}

bool progress_engine::progress() {
  pass_time_valid_ = false;
  coarse_valid_ = false;
  // Cleared however the pass ends (a callback may throw): outside a pass no cached time is used.
  struct pass_guard {
    bool& in_pass;
    explicit pass_guard(bool& flag) : in_pass(flag) { in_pass = true; }
    ~pass_guard() { in_pass = false; }
  } guard(in_pass_);
  size_t done = run_completions();
  // Index loop: a callback may attach or detach sources.
  for (size_t i = 0; i < sources_.size(); ++i) done += sources_[i]->poll();
  done += run_completions();
  if (!pass_end_.empty()) done += end_pass();
  if (done != 0) {
    ++hits_;
    if (mode_ == poll_mode::adaptive) last_hit_ = pass_time();
    return true;
  }
  ++misses_;
  return false;
}

void progress_engine::wait(std::chrono::microseconds timeout) {
  if (mode_ == poll_mode::busy || completed_head_ != nullptr) return;
  const auto now = pass_time();
  if (mode_ == poll_mode::adaptive && now - last_hit_ < spin_window_) {
    // Spinning, but not against a peer on this core (a service and its target often share
    // one): it would get the core only when our time slice ends, milliseconds per round trip.
    sched_yield();
    return;
  }

  auto deadline = now + timeout;
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (!watch(i)) ZC_SDK_LOG_ERROR("progress engine: cannot watch fd {}", sources_[i]->wait_fd());
    if (!sources_[i]->arm()) return;
    deadline = std::min(deadline, sources_[i]->next_deadline());
  }
  // An arm may progress its transport (the UCX worker does), and what that completed or made
  // due at a pass end must not wait for the sleep to end.
  if (completed_head_ != nullptr || !pass_end_.empty() || deadline <= now) return;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count();
  take_events(static_cast<int>(std::min<int64_t>(ms, 60'000)));
  pass_time_valid_ = false;  // slept: the next reader needs the clock again
}

void progress_engine::take_events(int timeout_ms) noexcept {
  epoll_event events[16];
  int n = epoll_wait(epoll_fd_, events, 16, timeout_ms);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.ptr == nullptr) {
      uint64_t value;
      [[maybe_unused]] ssize_t r = read(notify_fd_, &value, sizeof(value));
    } else {
      static_cast<event_source*>(events[i].data.ptr)->fd_ready();
    }
  }
}

bool progress_engine::arm_sources() noexcept {
  if (completed_head_ != nullptr) return false;
  for (size_t i = 0; i < sources_.size(); ++i) {
    if (!watch(i)) ZC_SDK_LOG_ERROR("progress engine: cannot watch fd {}", sources_[i]->wait_fd());
    if (!sources_[i]->arm()) return false;
  }
  return completed_head_ == nullptr && pass_end_.empty();
}

void progress_engine::clear_notify() noexcept {
  // The caller's own loop saw notification_fd() turn readable: tell the sources whose fds did
  // it, as wait() does, so that the next progress() drains them and the fd reads idle again.
  take_events(0);
}

void progress_engine::notify() noexcept {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t r = write(notify_fd_, &one, sizeof(one));
}

}  // namespace zc::core
