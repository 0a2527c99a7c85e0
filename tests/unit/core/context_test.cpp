// The context state machine, idle -> starting -> running -> stopping -> idle, as every engine
// follows it: the order of state-changed callbacks, and a stop with tasks in flight that reaches
// idle only after the last of their callbacks.
#include "core/context.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/progress_engine.hpp"

namespace zc::core {
namespace {

using namespace std::chrono_literals;

struct echo_task : task_base {
  int id = 0;
};

// A tiny engine: submitted tasks wait until the test releases them, then complete in poll().
// A start may be made to take a while (starting until finish_start()); a stop flushes every task
// still held with status::shutdown, as a real engine flushes its queues.
class echo_context : public context {
 public:
  explicit echo_context(progress_engine& engine, bool slow_start = false)
      : context(engine), slow_start_(slow_start) {}

  task_pool<echo_task> pool;

  status submit(echo_task& t) {
    if (state() != context_state::running) return status::bad_state;
    held_.push_back(&t);
    task_submitted();
    return status::success;
  }
  void release_held() { release_ = true; }
  void finish_start() { start_ready_ = true; }
  size_t held() const { return held_.size(); }

  size_t poll() override {
    size_t work = 0;
    if (state() == context_state::starting && start_ready_) {
      set_state(context_state::running);
      ++work;
    }
    if (release_) {
      for (echo_task* t : std::exchange(held_, {})) complete(*t, status::success);
      release_ = false;
      ++work;
    }
    return work;
  }

 protected:
  context_state on_start() override {
    start_ready_ = false;
    return slow_start_ ? context_state::starting : context_state::running;
  }
  void on_stop() override {
    for (echo_task* t : std::exchange(held_, {})) complete(*t, status::shutdown);
  }

 private:
  bool slow_start_;
  bool start_ready_ = false;
  bool release_ = false;
  std::vector<echo_task*> held_;
};

using transition = std::pair<context_state, context_state>;

// Records state changes, and other events, in one ordered log.
struct recorder {
  std::vector<std::string> events;
  std::vector<transition> transitions;
  void watch(context& ctx) {
    ctx.set_state_changed_callback([this](context&, context_state from, context_state to) {
      transitions.emplace_back(from, to);
      events.push_back(std::string(to_string(from)) + "->" + std::string(to_string(to)));
    });
  }
};

constexpr auto idle = context_state::idle;
constexpr auto starting = context_state::starting;
constexpr auto running = context_state::running;
constexpr auto stopping = context_state::stopping;

TEST(context, new_context_is_idle) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe);
  EXPECT_EQ(ctx.state(), idle);
  EXPECT_EQ(ctx.inflight(), 0u);
  EXPECT_EQ(&ctx.engine(), &pe);
}

TEST(context, start_with_nothing_to_wait_for_goes_straight_to_running) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe);
  recorder rec;
  rec.watch(ctx);
  EXPECT_EQ(ctx.start(), status::success);
  EXPECT_EQ(ctx.state(), running);
  EXPECT_EQ(rec.transitions, (std::vector<transition>{{idle, running}}));
}

TEST(context, slow_start_goes_through_starting_inside_progress) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe, /*slow_start=*/true);
  recorder rec;
  rec.watch(ctx);
  ASSERT_EQ(ctx.start(), status::success);
  EXPECT_EQ(ctx.state(), starting);
  pe.progress();
  EXPECT_EQ(ctx.state(), starting);
  ctx.finish_start();
  EXPECT_EQ(ctx.state(), starting);  // only progress() moves it on
  pe.progress();
  EXPECT_EQ(ctx.state(), running);
  EXPECT_EQ(rec.transitions, (std::vector<transition>{{idle, starting}, {starting, running}}));
}

TEST(context, start_when_not_idle_is_bad_state) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe, /*slow_start=*/true);
  ASSERT_EQ(ctx.start(), status::success);
  EXPECT_EQ(ctx.start(), status::bad_state);  // starting
  ctx.finish_start();
  pe.progress();
  ASSERT_EQ(ctx.state(), running);
  EXPECT_EQ(ctx.start(), status::bad_state);  // running
  EXPECT_EQ(ctx.state(), running);
}

TEST(context, stop_when_idle_succeeds_without_a_state_change) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe);
  recorder rec;
  rec.watch(ctx);
  EXPECT_EQ(ctx.stop(), status::success);
  EXPECT_EQ(ctx.state(), idle);
  EXPECT_TRUE(rec.transitions.empty());
}

TEST(context, stop_with_nothing_in_flight_reaches_idle_at_once) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe);
  recorder rec;
  rec.watch(ctx);
  ASSERT_EQ(ctx.start(), status::success);
  EXPECT_EQ(ctx.stop(), status::success);
  EXPECT_EQ(ctx.state(), idle);
  EXPECT_EQ(rec.transitions,
            (std::vector<transition>{{idle, running}, {running, stopping}, {stopping, idle}}));
}

TEST(context, stop_while_starting_reaches_idle) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe, /*slow_start=*/true);
  recorder rec;
  rec.watch(ctx);
  ASSERT_EQ(ctx.start(), status::success);
  EXPECT_EQ(ctx.stop(), status::success);
  EXPECT_EQ(ctx.state(), idle);
  EXPECT_EQ(rec.transitions,
            (std::vector<transition>{{idle, starting}, {starting, stopping}, {stopping, idle}}));
}

TEST(context, full_cycle_reports_every_transition_in_order) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe, /*slow_start=*/true);
  recorder rec;
  rec.watch(ctx);
  ASSERT_EQ(ctx.start(), status::success);
  ctx.finish_start();
  ASSERT_TRUE(pe.run_until([&] { return ctx.state() == running; }, 10s));
  ASSERT_EQ(ctx.stop(), status::success);
  EXPECT_EQ(rec.events, (std::vector<std::string>{"idle->starting", "starting->running",
                                                  "running->stopping", "stopping->idle"}));
}

TEST(context, tasks_complete_through_callbacks_inside_progress) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe);
  std::vector<int> done;
  ctx.pool.configure(
      ctx, 4, [&](echo_task& t) { done.push_back(t.id); }, nullptr);
  ASSERT_EQ(ctx.start(), status::success);
  for (int i = 0; i < 3; ++i) {
    echo_task* t = ctx.pool.allocate();
    t->id = i;
    ASSERT_EQ(ctx.submit(*t), status::success);
  }
  EXPECT_EQ(ctx.inflight(), 3u);
  ctx.release_held();
  EXPECT_TRUE(done.empty());
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(done, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(ctx.inflight(), 0u);
}

TEST(context, stop_with_tasks_in_flight_fails_them_then_reaches_idle_after_the_last_callback) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe);
  recorder rec;
  int successes = 0;
  ctx.pool.configure(
      ctx, 4, [&](echo_task&) { ++successes; },
      [&](echo_task& t) {
        EXPECT_EQ(t.result(), status::shutdown);
        // Still stopping while any callback runs, the last one included.
        EXPECT_EQ(ctx.state(), stopping);
        rec.events.push_back("error " + std::to_string(t.id));
        t.free();
      });
  ASSERT_EQ(ctx.start(), status::success);
  for (int i = 0; i < 3; ++i) {
    echo_task* t = ctx.pool.allocate();
    t->id = i;
    ASSERT_EQ(ctx.submit(*t), status::success);
  }
  rec.watch(ctx);

  ASSERT_EQ(ctx.stop(), status::success);
  EXPECT_EQ(ctx.state(), stopping);
  EXPECT_EQ(ctx.inflight(), 3u);
  EXPECT_EQ(ctx.stop(), status::in_progress);
  EXPECT_EQ(rec.events, (std::vector<std::string>{"running->stopping"}));

  EXPECT_TRUE(pe.run_until([&] { return ctx.state() == idle; }, 10s));
  EXPECT_EQ(rec.events, (std::vector<std::string>{"running->stopping", "error 0", "error 1",
                                                  "error 2", "stopping->idle"}));
  EXPECT_EQ(successes, 0);
  EXPECT_EQ(ctx.inflight(), 0u);
  EXPECT_EQ(ctx.pool.in_use(), 0u);
}

TEST(context, submit_is_refused_while_stopping) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe);
  ctx.pool.configure(ctx, 2, nullptr, nullptr);
  ASSERT_EQ(ctx.start(), status::success);
  ASSERT_EQ(ctx.submit(*ctx.pool.allocate()), status::success);
  ASSERT_EQ(ctx.stop(), status::success);
  ASSERT_EQ(ctx.state(), stopping);
  EXPECT_EQ(ctx.submit(*ctx.pool.allocate()), status::bad_state);
  EXPECT_TRUE(pe.run_until([&] { return ctx.state() == idle; }, 10s));
}

TEST(context, can_start_again_after_a_stop) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe);
  int successes = 0;
  ctx.pool.configure(
      ctx, 1,
      [&](echo_task& t) {
        ++successes;
        t.free();
      },
      [](echo_task& t) { t.free(); });
  ASSERT_EQ(ctx.start(), status::success);
  ASSERT_EQ(ctx.submit(*ctx.pool.allocate()), status::success);
  ASSERT_EQ(ctx.stop(), status::success);
  ASSERT_TRUE(pe.run_until([&] { return ctx.state() == idle; }, 10s));

  ASSERT_EQ(ctx.start(), status::success);
  EXPECT_EQ(ctx.state(), running);
  echo_task* t = ctx.pool.allocate();
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(ctx.submit(*t), status::success);
  ctx.release_held();
  EXPECT_TRUE(pe.run_until([&] { return successes == 1; }, 10s));
}

TEST(context, user_data_is_kept) {
  progress_engine pe(poll_mode::busy);
  echo_context ctx(pe);
  int anchor = 0;
  ctx.set_user_data(make_user_data(&anchor));
  EXPECT_EQ(ctx.get_user_data().ptr, &anchor);
  ctx.set_user_data(make_user_data(uint64_t{0x1234}));
  EXPECT_EQ(ctx.get_user_data().u64, 0x1234u);
}

TEST(context, destroyed_context_is_no_longer_polled) {
  progress_engine pe(poll_mode::busy);
  {
    echo_context ctx(pe);
    ASSERT_EQ(ctx.start(), status::success);
    ASSERT_EQ(ctx.stop(), status::success);
  }
  EXPECT_FALSE(pe.progress());
}

TEST(context, destroying_a_context_drops_its_queued_completions) {
  progress_engine pe(poll_mode::busy);
  echo_context survivor(pe);
  int survivor_calls = 0;
  survivor.pool.configure(
      survivor, 1, [&](echo_task&) { ++survivor_calls; }, nullptr);
  int doomed_calls = 0;
  {
    echo_context doomed(pe);
    doomed.pool.configure(
        doomed, 2, [&](echo_task&) { ++doomed_calls; }, nullptr);
    ASSERT_EQ(doomed.start(), status::success);
    ASSERT_EQ(survivor.start(), status::success);
    ASSERT_EQ(doomed.submit(*doomed.pool.allocate()), status::success);
    ASSERT_EQ(survivor.submit(*survivor.pool.allocate()), status::success);
    ASSERT_EQ(doomed.submit(*doomed.pool.allocate()), status::success);
    doomed.release_held();
    survivor.release_held();
    // Queue every completion without running a callback: poll the sources by hand.
    doomed.poll();
    survivor.poll();
  }
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(doomed_calls, 0);
  EXPECT_EQ(survivor_calls, 1);
}

TEST(context, state_names) {
  EXPECT_EQ(to_string(idle), "idle");
  EXPECT_EQ(to_string(starting), "starting");
  EXPECT_EQ(to_string(running), "running");
  EXPECT_EQ(to_string(stopping), "stopping");
}

}  // namespace
}  // namespace zc::core
