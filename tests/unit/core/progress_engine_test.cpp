// The progress engine: callbacks only inside progress(), hit/miss counting, run_until's bound, and
// how wait() sleeps in each poll mode and what wakes it.
//
// Checking that a wait() was woken needs a bound: the wait itself is given a long timeout
// (long_wait) and the test waits at most wake_bound for it to return. A wake-up that does not work
// fails the test after wake_bound; nothing here measures how long anything took.
#include "core/progress_engine.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/context.hpp"

namespace zc::core {
namespace {

using namespace std::chrono_literals;

constexpr auto long_wait = std::chrono::microseconds(30s);
constexpr auto wake_bound = 10s;
constexpr auto run_until_timeout = 50ms;
// Lets the waiting thread reach epoll_wait before it is woken; the test holds either way, because
// a wake-up that arrives before the wait is kept until the wait.
constexpr auto settle = 20ms;

struct probe_task : task_base {
  int id = 0;
};

// A context whose only job is to own a pool of tasks that the tests complete by hand.
class probe_context : public context {
 public:
  explicit probe_context(progress_engine& engine) : context(engine) {}
  task_pool<probe_task> pool;
  size_t poll() override { return 0; }

 protected:
  context_state on_start() override { return context_state::running; }
  void on_stop() override {}
};

// An event source that reports `work` units on every poll until told otherwise.
class counting_source : public event_source {
 public:
  size_t poll() override {
    ++polls;
    return work;
  }
  size_t work = 0;
  int polls = 0;
};

// An event source with an eventfd: readable means there is work; poll() drains it.
class fd_source : public event_source {
 public:
  fd_source() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~fd_source() override { close(fd_); }
  int wait_fd() const override { return fd_; }
  size_t poll() override {
    uint64_t value = 0;
    if (read(fd_, &value, sizeof(value)) != sizeof(value)) return 0;
    received += value;
    return 1;
  }
  void signal() const {
    uint64_t one = 1;
    ASSERT_EQ(write(fd_, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  }
  void fd_ready() override { ++ready_calls; }
  uint64_t received = 0;
  uint64_t ready_calls = 0;

 private:
  int fd_;
};

// Runs `blocking` on a helper thread, calls `wake` on this one, and reports whether `blocking`
// returned within wake_bound.
template <typename Blocking, typename Wake>
bool woken(Blocking&& blocking, Wake&& wake) {
  std::promise<void> returned;
  auto future = returned.get_future();
  std::thread waiter([&] {
    blocking();
    returned.set_value();
  });
  std::this_thread::sleep_for(settle);
  wake();
  const bool in_time = future.wait_for(wake_bound) == std::future_status::ready;
  waiter.join();
  return in_time;
}

template <typename Blocking>
bool returns_at_once(Blocking&& blocking) {
  return woken(std::forward<Blocking>(blocking), [] {});
}

TEST(progress_engine, progress_with_nothing_to_do_is_a_miss) {
  progress_engine pe(poll_mode::busy);
  EXPECT_FALSE(pe.progress());
  EXPECT_FALSE(pe.progress());
  EXPECT_EQ(pe.hits(), 0u);
  EXPECT_EQ(pe.misses(), 2u);
}

TEST(progress_engine, source_with_work_is_a_hit) {
  progress_engine pe(poll_mode::busy);
  counting_source source;
  pe.attach(source);
  EXPECT_FALSE(pe.progress());
  source.work = 3;
  EXPECT_TRUE(pe.progress());
  EXPECT_TRUE(pe.progress());
  source.work = 0;
  EXPECT_FALSE(pe.progress());
  EXPECT_EQ(pe.hits(), 2u);
  EXPECT_EQ(pe.misses(), 2u);
  EXPECT_EQ(source.polls, 4);
  pe.detach(source);
}

// A source that notes the time `read` gives it, `reads` times per poll, `gap` apart.
class timing_source : public event_source {
 public:
  explicit timing_source(std::function<steady_clock::time_point()> read, int reads = 1,
                         steady_clock::duration gap = {})
      : read_(std::move(read)), reads_(reads), gap_(gap) {}
  size_t poll() override {
    for (int i = 0; i < reads_; ++i) {
      if (i > 0) std::this_thread::sleep_for(gap_);
      seen.push_back(read_());
    }
    return 0;
  }
  std::vector<steady_clock::time_point> seen;

 private:
  std::function<steady_clock::time_point()> read_;
  int reads_;
  steady_clock::duration gap_;
};

// Every source of one pass shares one clock read; the next pass reads the clock again.
TEST(progress_engine, sources_of_one_pass_share_its_time_and_the_next_pass_moves_on) {
  progress_engine e(poll_mode::busy);
  timing_source a([&] { return e.pass_time(); }), b([&] { return e.pass_time(); });
  e.attach(a);
  e.attach(b);
  e.progress();
  ASSERT_EQ(a.seen.size(), 1u);
  ASSERT_EQ(b.seen.size(), 1u);
  EXPECT_EQ(a.seen[0], b.seen[0]);
  std::this_thread::sleep_for(1ms);
  const auto before_second = steady_clock::now();
  e.progress();
  ASSERT_EQ(a.seen.size(), 2u);
  EXPECT_GT(a.seen[1], a.seen[0]);
  EXPECT_GE(a.seen[1], before_second);
  EXPECT_EQ(a.seen[1], b.seen[1]);
  e.detach(a);
  e.detach(b);
}

// The coarse clock lags the precise one by at most its resolution, on the same timeline. The
// coarse read is bracketed by two precise ones, so a preemption between reads widens the bracket
// instead of failing the test.
TEST(progress_engine, coarse_now_follows_steady_clock_within_its_resolution) {
  ASSERT_GT(coarse_resolution(), steady_clock::duration::zero());
  const auto before = steady_clock::now();
  const auto coarse = coarse_now();
  const auto after = steady_clock::now();
  EXPECT_LE(coarse, after);
  EXPECT_GE(coarse, before - 2 * coarse_resolution());
}

// Inside a pass the coarse time is read once; outside it is read afresh, never a stale copy.
TEST(progress_engine, coarse_time_is_one_read_per_pass_and_fresh_outside_a_pass) {
  progress_engine e(poll_mode::busy);
  // Two reads three clock ticks apart: a fresh read would differ, the pass's one does not.
  timing_source a([&] { return e.coarse_time(); }, 2, 3 * coarse_resolution());
  e.attach(a);
  e.progress();
  ASSERT_EQ(a.seen.size(), 2u);
  EXPECT_EQ(a.seen[0], a.seen[1]);
  EXPECT_GE(coarse_now(), a.seen[0] + 2 * coarse_resolution());
  std::this_thread::sleep_for(3 * coarse_resolution());
  const auto outside = e.coarse_time();
  EXPECT_GT(outside, a.seen[0]);
  e.progress();
  ASSERT_EQ(a.seen.size(), 4u);
  EXPECT_GE(a.seen[2], outside);
  e.detach(a);
}

TEST(progress_engine, detached_source_is_not_polled) {
  progress_engine pe(poll_mode::busy);
  counting_source source;
  pe.attach(source);
  pe.progress();
  pe.detach(source);
  source.work = 1;
  EXPECT_FALSE(pe.progress());
  EXPECT_EQ(source.polls, 1);
}

TEST(progress_engine, completion_callbacks_run_only_inside_progress) {
  progress_engine pe(poll_mode::busy);
  probe_context ctx(pe);
  int successes = 0;
  ctx.pool.configure(
      ctx, 2, [&](probe_task&) { ++successes; }, nullptr);
  probe_task* t = ctx.pool.allocate();
  ASSERT_NE(t, nullptr);
  pe.complete(*t, status::success);
  EXPECT_EQ(successes, 0);
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(successes, 1);
  EXPECT_FALSE(pe.progress());
  EXPECT_EQ(successes, 1);
  EXPECT_EQ(pe.hits(), 1u);
  EXPECT_EQ(pe.misses(), 1u);
}

TEST(progress_engine, completions_run_in_the_order_they_were_queued) {
  progress_engine pe(poll_mode::busy);
  probe_context ctx(pe);
  std::vector<int> order;
  auto record = [&](probe_task& t) { order.push_back(t.id); };
  ctx.pool.configure(ctx, 3, record, record);
  std::vector<probe_task*> tasks;
  for (int i = 0; i < 3; ++i) {
    tasks.push_back(ctx.pool.allocate());
    tasks.back()->id = i;
  }
  pe.complete(*tasks[1], status::success);
  pe.complete(*tasks[0], status::io_failed);
  pe.complete(*tasks[2], status::success);
  pe.progress();
  EXPECT_EQ(order, (std::vector<int>{1, 0, 2}));
}

TEST(progress_engine, completion_queued_by_a_callback_runs_in_the_same_progress) {
  progress_engine pe(poll_mode::busy);
  probe_context ctx(pe);
  std::vector<int> order;
  probe_task* second = nullptr;
  ctx.pool.configure(
      ctx, 2,
      [&](probe_task& t) {
        order.push_back(t.id);
        if (t.id == 1) pe.complete(*second, status::success);
      },
      nullptr);
  probe_task* first = ctx.pool.allocate();
  second = ctx.pool.allocate();
  first->id = 1;
  second->id = 2;
  pe.complete(*first, status::success);
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

// A source that asked for the end of the pass is called once, after the pass's last completion
// callbacks (a callback queued by a callback included), and not again in the next pass.
TEST(progress_engine, pass_end_runs_once_after_the_last_callbacks_of_the_pass) {
  progress_engine pe(poll_mode::busy);
  probe_context ctx(pe);
  std::vector<std::string> order;
  struct ender : event_source {
    std::vector<std::string>* order = nullptr;
    size_t poll() override { return 0; }
    size_t pass_end() override {
      order->push_back("pass_end");
      return 1;
    }
  } end;
  end.order = &order;
  pe.attach(end);
  probe_task* second = nullptr;
  ctx.pool.configure(
      ctx, 2,
      [&](probe_task& t) {
        order.push_back("callback " + std::to_string(t.id));
        if (t.id == 1) pe.complete(*second, status::success);
      },
      nullptr);
  probe_task* first = ctx.pool.allocate();
  second = ctx.pool.allocate();
  first->id = 1;
  second->id = 2;
  pe.complete(*first, status::success);
  pe.call_at_pass_end(end);
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(order, (std::vector<std::string>{"callback 1", "callback 2", "pass_end"}));
  EXPECT_FALSE(pe.progress());
  EXPECT_EQ(order.size(), 3u);
  // A source detached after asking is not called.
  pe.call_at_pass_end(end);
  pe.detach(end);
  pe.progress();
  EXPECT_EQ(order.size(), 3u);
}

TEST(progress_engine, run_until_returns_true_once_done) {
  progress_engine pe(poll_mode::event);
  counting_source source;
  source.work = 1;
  pe.attach(source);
  EXPECT_TRUE(pe.run_until([&] { return source.polls >= 3; }, wake_bound));
  EXPECT_GE(source.polls, 3);
  pe.detach(source);
}

TEST(progress_engine, run_until_returns_false_at_its_timeout) {
  for (poll_mode mode : {poll_mode::busy, poll_mode::adaptive, poll_mode::event}) {
    progress_engine pe(mode);
    EXPECT_FALSE(pe.run_until([] { return false; }, run_until_timeout));
    EXPECT_GE(pe.misses(), 1u);
  }
}

TEST(progress_engine, run_until_is_woken_by_another_thread) {
  progress_engine pe(poll_mode::event);
  std::atomic<bool> flag{false};
  std::thread other([&] {
    std::this_thread::sleep_for(settle);
    flag = true;
    pe.notify();
  });
  EXPECT_TRUE(pe.run_until([&] { return flag.load(); }, wake_bound));
  other.join();
}

TEST(progress_engine, event_mode_wait_is_woken_by_notify_from_another_thread) {
  progress_engine pe(poll_mode::event);
  std::thread notifier;
  EXPECT_TRUE(
      woken([&] { pe.wait(long_wait); }, [&] { notifier = std::thread([&] { pe.notify(); }); }));
  notifier.join();
}

TEST(progress_engine, notify_before_wait_is_not_lost) {
  progress_engine pe(poll_mode::event);
  pe.notify();
  EXPECT_TRUE(returns_at_once([&] { pe.wait(long_wait); }));
}

TEST(progress_engine, event_mode_wait_is_woken_when_a_source_fd_becomes_readable) {
  progress_engine pe(poll_mode::event);
  fd_source source;
  pe.attach(source);
  EXPECT_TRUE(woken([&] { pe.wait(long_wait); }, [&] { source.signal(); }));
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(source.received, 1u);
  pe.detach(source);
}

// The source whose fd woke the engine is told so; one whose fd stayed quiet is not.
TEST(progress_engine, a_source_whose_fd_woke_the_engine_is_told_and_no_other) {
  progress_engine pe(poll_mode::event);
  fd_source rung, quiet;
  pe.attach(rung);
  pe.attach(quiet);
  EXPECT_TRUE(woken([&] { pe.wait(long_wait); }, [&] { rung.signal(); }));
  EXPECT_EQ(rung.ready_calls, 1u);
  EXPECT_EQ(quiet.ready_calls, 0u);
  EXPECT_TRUE(pe.progress());
  pe.wait(std::chrono::milliseconds(1));  // nothing readable: a timeout tells no one
  EXPECT_EQ(rung.ready_calls, 1u);
  EXPECT_EQ(quiet.ready_calls, 0u);
  pe.detach(quiet);
  pe.detach(rung);
}

TEST(progress_engine, busy_mode_wait_returns_at_once) {
  progress_engine pe(poll_mode::busy);
  EXPECT_TRUE(returns_at_once([&] { pe.wait(long_wait); }));
}

TEST(progress_engine, adaptive_mode_wait_returns_at_once_inside_the_spin_window) {
  progress_engine pe(poll_mode::adaptive);
  pe.set_spin_window(std::chrono::microseconds(60s));
  counting_source source;
  source.work = 1;
  pe.attach(source);
  ASSERT_TRUE(pe.progress());
  EXPECT_TRUE(returns_at_once([&] { pe.wait(long_wait); }));
  pe.detach(source);
}

TEST(progress_engine, adaptive_mode_sleeps_after_the_spin_window_until_notified) {
  progress_engine pe(poll_mode::adaptive);
  pe.set_spin_window(std::chrono::microseconds(0));
  counting_source source;
  source.work = 1;
  pe.attach(source);
  ASSERT_TRUE(pe.progress());
  EXPECT_TRUE(woken([&] { pe.wait(long_wait); }, [&] { pe.notify(); }));
  pe.detach(source);
}

TEST(progress_engine, wait_returns_at_once_when_a_completion_is_pending) {
  progress_engine pe(poll_mode::event);
  probe_context ctx(pe);
  ctx.pool.configure(ctx, 1, nullptr, nullptr);
  pe.complete(*ctx.pool.allocate(), status::success);
  EXPECT_TRUE(returns_at_once([&] { pe.wait(long_wait); }));
  EXPECT_TRUE(pe.progress());
}

TEST(progress_engine, wait_returns_at_once_when_a_source_has_work_pending) {
  class busy_source : public event_source {
   public:
    size_t poll() override { return 0; }
    bool arm() override { return false; }
  } source;
  progress_engine pe(poll_mode::event);
  pe.attach(source);
  EXPECT_TRUE(returns_at_once([&] { pe.wait(long_wait); }));
  pe.detach(source);
}

// An arm may progress its transport (the UCX worker does): a completion that produced must run
// before the engine sleeps. The quiet source's fd is readable, so a wait that went on to epoll
// would tell it (fd_ready); one that returned at the completion tells no one.
TEST(progress_engine, wait_does_not_sleep_on_a_completion_that_an_arm_queued) {
  progress_engine pe(poll_mode::event);
  probe_context ctx(pe);
  ctx.pool.configure(ctx, 1, nullptr, nullptr);
  class completing_source : public event_source {
   public:
    size_t poll() override { return 0; }
    bool arm() override {
      if (task != nullptr) engine->complete(*std::exchange(task, nullptr), status::success);
      return true;
    }
    progress_engine* engine = nullptr;
    task_base* task = nullptr;
  } completing;
  completing.engine = &pe;
  completing.task = ctx.pool.allocate();
  fd_source readable;
  pe.attach(completing);
  pe.attach(readable);
  readable.signal();
  EXPECT_TRUE(returns_at_once([&] { pe.wait(long_wait); }));
  EXPECT_EQ(readable.ready_calls, 0u);
  EXPECT_TRUE(pe.progress());
  pe.detach(readable);
  pe.detach(completing);
}

// A caller that sleeps on notification_fd() in its own loop (DOCA's notification handle) never
// calls wait(): clear_notify() must tell the sources whose fds are ready, or a source that drains
// its fd only when told would leave the handle readable for ever.
TEST(progress_engine, clear_notify_tells_the_sources_whose_fds_are_ready) {
  class told_source : public fd_source {
   public:
    size_t poll() override { return told_ ? (told_ = false, fd_source::poll()) : 0; }
    void fd_ready() override {
      fd_source::fd_ready();
      told_ = true;
    }

   private:
    bool told_ = false;
  } rung, quiet;
  progress_engine pe(poll_mode::event);
  pe.attach(rung);
  pe.attach(quiet);
  const auto readable = [&] {
    pollfd pfd{pe.notification_fd(), POLLIN, 0};
    return ::poll(&pfd, 1, 0) == 1;
  };
  ASSERT_TRUE(pe.arm_sources());
  EXPECT_FALSE(readable());
  rung.signal();
  EXPECT_TRUE(readable());
  pe.clear_notify();
  EXPECT_EQ(rung.ready_calls, 1u);
  EXPECT_EQ(quiet.ready_calls, 0u);
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(rung.received, 1u);
  ASSERT_TRUE(pe.arm_sources());
  EXPECT_FALSE(readable());
  pe.detach(quiet);
  pe.detach(rung);
}

TEST(progress_engine, wait_ends_at_a_source_deadline) {
  class deadline_source : public event_source {
   public:
    size_t poll() override { return 0; }
    steady_clock::time_point next_deadline() const override { return deadline; }
    steady_clock::time_point deadline = steady_clock::now() + settle;
  } source;
  progress_engine pe(poll_mode::event);
  pe.attach(source);
  EXPECT_TRUE(returns_at_once([&] { pe.wait(long_wait); }));
  pe.detach(source);
}

// A context with its own file descriptor (a doorbell, a socket), as comch and rdma contexts have.
class doorbell_context : public context {
 public:
  explicit doorbell_context(progress_engine& engine)
      : context(engine), fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~doorbell_context() override { close(fd_); }
  int wait_fd() const override { return fd_; }
  size_t poll() override {
    uint64_t value = 0;
    return read(fd_, &value, sizeof(value)) == sizeof(value) ? 1 : 0;
  }
  void ring() const {
    uint64_t one = 1;
    ASSERT_EQ(write(fd_, &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  }

 protected:
  context_state on_start() override { return context_state::running; }
  void on_stop() override {}

 private:
  int fd_;
};

TEST(progress_engine, event_mode_wait_is_woken_by_a_context_fd) {
  progress_engine pe(poll_mode::event);
  doorbell_context ctx(pe);
  ASSERT_EQ(ctx.start(), status::success);
  EXPECT_TRUE(woken([&] { pe.wait(long_wait); }, [&] { ctx.ring(); }));
  EXPECT_TRUE(pe.progress());
}

TEST(progress_engine, shared_object_is_made_once_per_engine) {
  progress_engine pe(poll_mode::busy);
  int made = 0;
  const int key = 0;
  auto make = [&] {
    ++made;
    return std::make_shared<std::string>("worker");
  };
  auto a = pe.shared<std::string>(&key, make);
  auto b = pe.shared<std::string>(&key, make);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(made, 1);
  const int other_key = 0;
  auto c = pe.shared<std::string>(&other_key, make);
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(made, 2);

  progress_engine other(poll_mode::busy);
  EXPECT_NE(other.shared<std::string>(&key, make).get(), a.get());
}

TEST(progress_engine, reports_its_mode) {
  EXPECT_EQ(progress_engine(poll_mode::busy).mode(), poll_mode::busy);
  EXPECT_EQ(progress_engine(poll_mode::event).mode(), poll_mode::event);
  EXPECT_EQ(progress_engine().mode(), poll_mode::adaptive);
}

}  // namespace
}  // namespace zc::core
