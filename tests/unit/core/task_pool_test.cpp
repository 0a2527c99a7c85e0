// Task pools: sized once at configure time, then allocate/free only; an empty pool says so with
// nullptr rather than allocating. Callbacks are chosen by the task's result.
#include "core/task.hpp"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "core/context.hpp"
#include "core/progress_engine.hpp"

namespace zc::core {
namespace {

struct sample_task : task_base {
  int payload = 0;
};

// Owns a pool; the tests complete tasks through the engine directly.
class pool_context : public context {
 public:
  explicit pool_context(progress_engine& engine) : context(engine) {}
  task_pool<sample_task> pool;
  size_t poll() override { return 0; }

 protected:
  context_state on_start() override { return context_state::running; }
  void on_stop() override {}
};

class task_pool_test : public testing::Test {
 protected:
  progress_engine pe{poll_mode::busy};
  pool_context ctx{pe};
};

TEST_F(task_pool_test, unconfigured_pool_is_empty) {
  EXPECT_FALSE(ctx.pool.configured());
  EXPECT_EQ(ctx.pool.capacity(), 0u);
  EXPECT_EQ(ctx.pool.allocate(), nullptr);
  EXPECT_EQ(ctx.pool.at(0), nullptr);
}

TEST_F(task_pool_test, configure_creates_the_tasks) {
  ctx.pool.configure(ctx, 4, nullptr, nullptr);
  EXPECT_TRUE(ctx.pool.configured());
  EXPECT_EQ(ctx.pool.capacity(), 4u);
  EXPECT_EQ(ctx.pool.in_use(), 0u);
  for (uint32_t i = 0; i < 4; ++i) {
    ASSERT_NE(ctx.pool.at(i), nullptr);
    EXPECT_EQ(ctx.pool.at(i)->pool_index(), i);
    EXPECT_EQ(&ctx.pool.at(i)->owner(), &ctx);
  }
  EXPECT_EQ(ctx.pool.at(4), nullptr);
}

TEST_F(task_pool_test, exhausted_pool_returns_nullptr) {
  ctx.pool.configure(ctx, 3, nullptr, nullptr);
  std::set<sample_task*> taken;
  for (int i = 0; i < 3; ++i) {
    sample_task* t = ctx.pool.allocate();
    ASSERT_NE(t, nullptr);
    EXPECT_TRUE(taken.insert(t).second) << "handed out twice";
  }
  EXPECT_EQ(ctx.pool.in_use(), 3u);
  EXPECT_EQ(ctx.pool.allocate(), nullptr);
  EXPECT_EQ(ctx.pool.in_use(), 3u);
}

TEST_F(task_pool_test, freed_task_is_reused) {
  ctx.pool.configure(ctx, 2, nullptr, nullptr);
  sample_task* a = ctx.pool.allocate();
  sample_task* b = ctx.pool.allocate();
  ASSERT_EQ(ctx.pool.allocate(), nullptr);
  b->free();
  EXPECT_EQ(ctx.pool.in_use(), 1u);
  EXPECT_EQ(ctx.pool.allocate(), b);
  a->free();
  b->free();
  EXPECT_EQ(ctx.pool.in_use(), 0u);
}

TEST_F(task_pool_test, freeing_twice_does_not_hand_a_task_out_twice) {
  ctx.pool.configure(ctx, 2, nullptr, nullptr);
  sample_task* a = ctx.pool.allocate();
  a->free();
  a->free();
  EXPECT_EQ(ctx.pool.in_use(), 0u);
  sample_task* first = ctx.pool.allocate();
  sample_task* second = ctx.pool.allocate();
  EXPECT_NE(first, second);
  EXPECT_EQ(ctx.pool.allocate(), nullptr);
  EXPECT_EQ(ctx.pool.in_use(), 2u);
}

TEST_F(task_pool_test, success_and_error_callbacks_follow_the_result) {
  std::vector<status> successes, errors;
  ctx.pool.configure(
      ctx, 2, [&](sample_task& t) { successes.push_back(t.result()); },
      [&](sample_task& t) { errors.push_back(t.result()); });
  sample_task* good = ctx.pool.allocate();
  sample_task* bad = ctx.pool.allocate();
  pe.complete(*good, status::success);
  pe.complete(*bad, status::io_failed);
  pe.progress();
  EXPECT_EQ(successes, (std::vector<status>{status::success}));
  EXPECT_EQ(errors, (std::vector<status>{status::io_failed}));
}

TEST_F(task_pool_test, missing_callbacks_are_fine) {
  ctx.pool.configure(ctx, 1, nullptr, nullptr);
  sample_task* t = ctx.pool.allocate();
  pe.complete(*t, status::io_failed);
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(t->result(), status::io_failed);
}

TEST_F(task_pool_test, allocate_resets_the_result_of_a_reused_task) {
  ctx.pool.configure(ctx, 1, nullptr, [](sample_task& t) { t.free(); });
  sample_task* t = ctx.pool.allocate();
  pe.complete(*t, status::time_out);
  pe.progress();
  sample_task* again = ctx.pool.allocate();
  ASSERT_EQ(again, t);
  EXPECT_EQ(again->result(), status::success);
}

TEST_F(task_pool_test, user_data_travels_with_the_task) {
  uint64_t seen = 0;
  ctx.pool.configure(
      ctx, 1, [&](sample_task& t) { seen = t.get_user_data().u64; }, nullptr);
  sample_task* t = ctx.pool.allocate();
  t->set_user_data(make_user_data(uint64_t{0xFEEDFACECAFEBEEFull}));
  t->payload = 7;
  pe.complete(*t, status::success);
  pe.progress();
  EXPECT_EQ(seen, 0xFEEDFACECAFEBEEFull);
  int anchor = 0;
  t->set_user_data(make_user_data(&anchor));
  EXPECT_EQ(t->get_user_data().ptr, &anchor);
}

TEST_F(task_pool_test, task_freed_in_its_callback_can_be_allocated_again_at_once) {
  sample_task* reallocated = nullptr;
  ctx.pool.configure(
      ctx, 1,
      [&](sample_task& t) {
        t.free();
        reallocated = ctx.pool.allocate();
      },
      nullptr);
  sample_task* t = ctx.pool.allocate();
  pe.complete(*t, status::success);
  pe.progress();
  EXPECT_EQ(reallocated, t);
  EXPECT_EQ(ctx.pool.in_use(), 1u);
}

TEST_F(task_pool_test, completed_task_may_be_completed_again) {
  // A receive is typically resubmitted from its own callback.
  int calls = 0;
  sample_task* t = nullptr;
  ctx.pool.configure(
      ctx, 1, [&](sample_task&) { ++calls; }, nullptr);
  t = ctx.pool.allocate();
  pe.complete(*t, status::success);
  pe.progress();
  pe.complete(*t, status::success);
  pe.progress();
  EXPECT_EQ(calls, 2);
}

TEST_F(task_pool_test, reconfiguring_drops_queued_completions_of_the_old_tasks) {
  int old_calls = 0, new_calls = 0;
  ctx.pool.configure(
      ctx, 2, [&](sample_task&) { ++old_calls; }, nullptr);
  pe.complete(*ctx.pool.allocate(), status::success);
  ctx.pool.configure(
      ctx, 2, [&](sample_task&) { ++new_calls; }, nullptr);
  EXPECT_FALSE(pe.progress());
  EXPECT_EQ(old_calls, 0);
  EXPECT_EQ(new_calls, 0);
  pe.complete(*ctx.pool.allocate(), status::success);
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(new_calls, 1);
}

TEST_F(task_pool_test, tasks_keep_their_address_for_the_pool_lifetime) {
  ctx.pool.configure(ctx, 8, nullptr, nullptr);
  std::vector<sample_task*> first;
  for (int i = 0; i < 8; ++i) first.push_back(ctx.pool.allocate());
  for (auto* t : first) t->free();
  std::set<sample_task*> second;
  for (int i = 0; i < 8; ++i) second.insert(ctx.pool.allocate());
  EXPECT_EQ(second, std::set<sample_task*>(first.begin(), first.end()));
}

}  // namespace
}  // namespace zc::core
