// engine_thread: jobs run on the worker, and a pass of its loop with nothing queued costs no heap
// allocation. Allocations are counted per thread by replacing the global operator new in this
// test binary (malloc/free underneath, so sanitizers still see every block).
#include "core/engine_thread.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>

#include "support/allocation_counter.hpp"

namespace zc::core {
namespace {

using namespace std::chrono_literals;

constexpr auto wait_limit = 10s;

TEST(engine_thread, call_runs_the_job_on_the_worker_and_returns_its_result) {
  engine_thread worker;
  const auto here = std::this_thread::get_id();
  EXPECT_NE(worker.call([] { return std::this_thread::get_id(); }, wait_limit), here);
  EXPECT_EQ(worker.call([] { return 42; }, wait_limit), 42);
  EXPECT_THROW(worker.call([]() -> int { throw status_error(status::bad_state, "job"); }),
               status_error);
}

TEST(engine_thread, idle_passes_allocate_nothing) {
  // Busy mode: the loop never sleeps, so the passes run back to back while we wait.
  constexpr int passes = 2000;
  engine_thread worker(poll_mode::busy);
  const uint64_t before =
      worker.call([] { return zc::test::allocations_on_this_thread(); }, wait_limit);
  int seen = 0;  // the worker's alone until wait_until returns
  ASSERT_TRUE(worker.wait_until([&] { return ++seen >= passes; }, wait_limit));
  const uint64_t after =
      worker.call([] { return zc::test::allocations_on_this_thread(); }, wait_limit);
  // What wait_until itself costs the worker (its waiter's list node, the job that adds it) is a
  // handful, whatever the number of passes.
  EXPECT_LT(after - before, uint64_t{passes / 100}) << "over " << seen << " passes";
}

}  // namespace
}  // namespace zc::core
