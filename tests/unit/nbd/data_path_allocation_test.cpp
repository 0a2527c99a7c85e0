// Run to completion allocates nothing per request: a server polled by its engine thread over a
// backend that completes on that thread, a client keeping reads and writes in flight; once warm,
// the engine thread makes no heap allocation (counted by replacing operator new for this test
// binary).
#include "core/engine_thread.hpp"
#include "nbd/server_source.hpp"
#include "server_fixture.hpp"
#include "support/allocation_counter.hpp"

namespace zc::nbd::test {
namespace {

constexpr int depth = 16;

// depth requests in flight, then their replies, alternating reads and writes of 4 KiB.
bool round_trip(raw_client& c, uint64_t round, const std::vector<uint8_t>& payload) {
  for (int i = 0; i < depth; ++i) {
    const uint64_t offset = ((round * depth + i) % 1024) * block;
    const bool write = i % 2 == 0;
    if (!c.request(write ? command::write : command::read, round * depth + i, offset, block))
      return false;
    if (write && !c.send(payload)) return false;
  }
  for (int i = 0; i < depth; ++i) {
    auto r = c.simple_reply();
    if (!r || r->first != 0) return false;
    if (r->second % 2 == 1 && c.recv(block).size() != block) return false;  // a read's data
  }
  return true;
}

TEST(nbd_data_path, steady_state_allocates_nothing_on_the_engine_thread) {
  const fs::path dir = fs::temp_directory_path() / zc::test::unique_name("nbd-alloc");
  fs::create_directories(dir);
  const std::string socket = (dir / "sock").string();
  memory_backend backend(disk_size, block, max_io, 64);
  backend.complete_on_server_thread();
  server srv(backend, {});
  srv.listen_unix(socket);
  core::engine_thread thread(core::poll_mode::event);
  server_source source(srv, thread.engine());
  thread.call([&] { thread.engine().attach(source); });
  {
    raw_client c(socket);
    ASSERT_TRUE(open_all({&c}));
    const auto payload = pattern(block, 3);
    uint64_t round = 0;
    for (; round < 50; ++round) ASSERT_TRUE(round_trip(c, round, payload));  // queues grow once
    auto allocations = [&] {
      return thread.call([] { return zc::test::allocations_on_this_thread(); });
    };
    // The test's own call() jobs allocate on the engine thread too (a packaged task): counted
    // once per window, so a window's count of a clean data path is what two calls cost.
    const uint64_t a = allocations(), b = allocations();
    const uint64_t per_call = b - a;
    uint64_t fewest = UINT64_MAX;
    for (int window = 0; window < 3 && fewest != 0; ++window) {
      const uint64_t before = allocations();
      for (int i = 0; i < 100; ++i, ++round) ASSERT_TRUE(round_trip(c, round, payload));
      fewest = std::min(fewest, allocations() - before - per_call);
    }
    EXPECT_EQ(fewest, 0u) << "heap allocations on the engine thread in 1600 requests";
  }
  srv.stop();
  ASSERT_TRUE(thread.wait_until([&] { return source.finished(); }, 20s));
  thread.call([&] { thread.engine().detach(source); });
  fs::remove_all(dir);
}

}  // namespace
}  // namespace zc::nbd::test
