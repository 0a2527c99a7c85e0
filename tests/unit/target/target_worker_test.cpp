// target_worker on its own, without a target process: what the control thread's bounded waits
// leave behind when they give up.
#include "target/worker.hpp"

#include <gtest/gtest.h>

#include <chrono>

#include "core/device.hpp"
#include "core/memory_map.hpp"

namespace zc::target {
namespace {

using namespace std::chrono_literals;

// Building a worker (its message buffers, task pools and two rdma contexts) is a bounded wait on
// the worker's thread. Whatever the bound, the result is a worker or a time_out, and a build the
// caller gave up on is destroyed by the worker's thread once it finishes: the build used to go on
// writing into a worker that the failed constructor had already destroyed, on the wrong thread.
TEST(target_worker, a_build_that_outlives_its_bound_is_torn_down_on_the_worker_thread) {
  const auto device = core::device::open("tcp");
  auto storage = target_storage::in_memory(64 * 1024);
  // The requester's region is only used once IOs arrive; local memory stands in for it here.
  auto remote = core::memory_map::allocate(64 * 1024, core::access::local_read_write);
  constexpr uint32_t transactions = 65536;
  int timed_out = 0;
  int built = 0;
  // Bounds from 0 ms doubling until one build finishes within its bound.
  for (int ms = 0; built == 0 && ms <= 10000; ms = ms == 0 ? 1 : 2 * ms) {
    SCOPED_TRACE(std::to_string(ms) + " ms");
    // Only the constructor is under the tiny bound: a time_out here is a build given up on.
    try {
      target_worker w(0, core::poll_mode::event, device, *storage, *remote, transactions,
                      {std::chrono::milliseconds(ms), 1s});
      ++built;
    } catch (const status_error& e) {
      EXPECT_EQ(e.code(), status::time_out) << e.what();
      ++timed_out;
    }
  }
  EXPECT_GT(built, 0) << "no build finished within 10 s";
  EXPECT_GT(timed_out, 0) << "no build outlived its bound: the case under test never happened";
  // With the default bound a worker is built, and stops cleanly without ever being connected.
  target_worker w(0, core::poll_mode::event, device, *storage, *remote, transactions);
  EXPECT_FALSE(w.ready()) << "running without a peer";
  w.stop();
  const worker_stats s = w.stats();
  EXPECT_EQ(s.operations, 0u);
  EXPECT_EQ(s.errors, 0u);
}

}  // namespace
}  // namespace zc::target
