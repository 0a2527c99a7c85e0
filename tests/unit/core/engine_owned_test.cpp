// engine_thread::post() and core::engine_owned: objects of an engine thread are built, used and
// destroyed on that thread, whether the caller waits, gives up, or the build throws. Each probe
// records the threads it was made and destroyed on; every wait is bounded.
#include "core/engine_owned.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

namespace zc::core {
namespace {

using namespace std::chrono_literals;

constexpr auto wait_limit = 10s;

struct probe_log {
  std::thread::id built_on;
  std::thread::id destroyed_on;
  std::atomic<int> alive{0};
};

struct probe {
  explicit probe(std::shared_ptr<probe_log> log) : log_(std::move(log)) {
    log_->built_on = std::this_thread::get_id();
    ++log_->alive;
  }
  ~probe() {
    log_->destroyed_on = std::this_thread::get_id();
    --log_->alive;
  }
  std::shared_ptr<probe_log> log_;
};

std::thread::id id_of(engine_thread& t) {
  return t.call([] { return std::this_thread::get_id(); });
}

// Waits until every job posted before it has run (jobs run in order).
void drain(engine_thread& t) {
  t.call([] {}, wait_limit);
}

TEST(engine_thread, post_runs_on_the_engine_thread_without_waiting) {
  engine_thread t;
  std::promise<std::thread::id> ran;
  auto got = ran.get_future();
  t.post([&] { ran.set_value(std::this_thread::get_id()); });
  ASSERT_EQ(got.wait_for(wait_limit), std::future_status::ready);
  EXPECT_EQ(got.get(), id_of(t));
}

TEST(engine_thread, a_job_posted_just_before_destruction_still_runs) {
  auto log = std::make_shared<probe_log>();
  std::thread::id engine;
  {
    engine_thread t;
    engine = id_of(t);
    auto* p = t.call([log] { return new probe(log); });
    t.post([p] { delete p; });
  }
  EXPECT_EQ(log->alive, 0);
  EXPECT_EQ(log->destroyed_on, engine);
}

TEST(engine_thread, a_wait_that_gives_up_leaves_no_predicate_behind) {
  engine_thread t;
  auto evaluations = std::make_shared<std::atomic<int>>(0);
  EXPECT_FALSE(t.wait_until(
      [evaluations] {
        ++*evaluations;
        return false;
      },
      20ms));
  drain(t);
  const int after_give_up = *evaluations;
  // Progress passes after the withdrawal must not evaluate it again.
  for (int i = 0; i < 3; ++i) drain(t);
  EXPECT_EQ(*evaluations, after_give_up);
}

TEST(engine_owned, built_used_and_destroyed_on_the_engine_thread) {
  auto log = std::make_shared<probe_log>();
  engine_thread t;
  const auto engine = id_of(t);
  auto owned = engine_owned<probe>::build(
      t, [log] { return std::make_unique<probe>(log); }, wait_limit);
  ASSERT_TRUE(owned);
  EXPECT_EQ(log->built_on, engine);
  EXPECT_EQ(t.call([p = owned.get()] { return p->log_.get(); }), log.get());
  owned.reset();
  EXPECT_FALSE(owned);
  drain(t);
  EXPECT_EQ(log->alive, 0);
  EXPECT_EQ(log->destroyed_on, engine);
}

TEST(engine_owned, destroyed_by_the_join_when_it_goes_just_before_its_thread) {
  auto log = std::make_shared<probe_log>();
  std::thread::id engine;
  {
    engine_thread t;
    engine = id_of(t);
    auto owned = engine_owned<probe>::build(
        t, [log] { return std::make_unique<probe>(log); }, wait_limit);
    // A job still queued when the owner goes sees the object alive.
    t.post([p = owned.get(), log] { EXPECT_EQ(log->alive, 1) << p; });
  }  // owned posts its destruction, then t joins
  EXPECT_EQ(log->alive, 0);
  EXPECT_EQ(log->destroyed_on, engine);
}

TEST(engine_owned, a_build_that_times_out_is_destroyed_by_the_engine_thread) {
  auto log = std::make_shared<probe_log>();
  engine_thread t;
  const auto engine = id_of(t);
  auto release = std::make_shared<std::promise<void>>();
  auto released = release->get_future().share();
  try {
    (void)engine_owned<probe>::build(
        t,
        [log, released] {
          auto p = std::make_unique<probe>(log);
          // Still building when the caller's wait ends.
          if (released.wait_for(wait_limit) != std::future_status::ready) ADD_FAILURE();
          return p;
        },
        50ms);
    FAIL() << "the build did not time out";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::time_out);
  }
  release->set_value();
  drain(t);
  EXPECT_EQ(log->built_on, engine);
  EXPECT_EQ(log->alive, 0) << "the abandoned object was kept";
  EXPECT_EQ(log->destroyed_on, engine);
}

TEST(engine_owned, a_build_that_throws_unwinds_on_the_engine_thread) {
  auto log = std::make_shared<probe_log>();
  engine_thread t;
  const auto engine = id_of(t);
  EXPECT_THROW((void)engine_owned<probe>::build(
                   t,
                   [log]() -> std::unique_ptr<probe> {
                     auto partial = std::make_unique<probe>(log);
                     throw status_error(status::no_memory, "out of tasks");
                   },
                   wait_limit),
               status_error);
  EXPECT_EQ(log->alive, 0);
  EXPECT_EQ(log->destroyed_on, engine);
}

TEST(engine_owned, moves_keep_a_single_owner) {
  auto log = std::make_shared<probe_log>();
  engine_thread t;
  auto a = engine_owned<probe>::build(
      t, [log] { return std::make_unique<probe>(log); }, wait_limit);
  engine_owned<probe> b = std::move(a);
  EXPECT_FALSE(a);
  ASSERT_TRUE(b);
  engine_owned<probe> c;
  c = std::move(b);
  EXPECT_FALSE(b);
  drain(t);
  EXPECT_EQ(log->alive, 1);
  c.reset();
  drain(t);
  EXPECT_EQ(log->alive, 0);
}

}  // namespace
}  // namespace zc::core
