// Run to completion allocates nothing per request: a server polled by its engine thread over a
// backend that completes on that thread, a client keeping reads and writes in flight; once warm,
// the engine thread makes no heap allocation (counted by replacing operator new for this test
// binary).
#include <optional>

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

// A server polled by an engine thread over a memory backend that completes on that thread.
struct engine_served {
  explicit engine_served(const char* name)
      : dir(fs::temp_directory_path() / zc::test::unique_name(name)),
        backend(disk_size, block, max_io, 64),
        thread(core::poll_mode::event) {
    fs::create_directories(dir);
    backend.complete_on_server_thread();
    srv.emplace(backend, server_options{});
    srv->listen_unix(socket());
    source.emplace(*srv, thread.engine());
    thread.call([&] { thread.engine().attach(*source); });
  }
  ~engine_served() {
    srv->stop();
    EXPECT_TRUE(thread.wait_until([&] { return source->finished(); }, 20s));
    thread.call([&] { thread.engine().detach(*source); });
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string socket() const { return (dir / "sock").string(); }

  // The fewest heap allocations on the engine thread over up to three windows of 100 calls of
  // round(r) (r counting on from `r`), after the caller's warm-up. The test's own call() jobs
  // allocate there too (a packaged task): what two calls cost is taken off each window.
  template <typename Round>
  uint64_t fewest_allocations(uint64_t r, Round round) {
    auto allocations = [&] {
      return thread.call([] { return zc::test::allocations_on_this_thread(); });
    };
    const uint64_t a = allocations(), b = allocations();
    const uint64_t per_call = b - a;
    uint64_t fewest = UINT64_MAX;
    for (int window = 0; window < 3 && fewest != 0; ++window) {
      const uint64_t before = allocations();
      for (int i = 0; i < 100; ++i, ++r)
        if (!round(r)) return UINT64_MAX;
      fewest = std::min(fewest, allocations() - before - per_call);
    }
    return fewest;
  }

  fs::path dir;
  memory_backend backend;
  std::optional<server> srv;
  core::engine_thread thread;
  std::optional<server_source> source;
};

TEST(nbd_data_path, steady_state_allocates_nothing_on_the_engine_thread) {
  engine_served e("nbd-alloc");
  raw_client c(e.socket());
  ASSERT_TRUE(open_all({&c}));
  const auto payload = pattern(block, 3);
  uint64_t round = 0;
  for (; round < 50; ++round) ASSERT_TRUE(round_trip(c, round, payload));  // queues grow once
  EXPECT_EQ(e.fewest_allocations(round, [&](uint64_t r) { return round_trip(c, r, payload); }), 0u)
      << "heap allocations on the engine thread in 1600 requests";
}

// BLOCK_STATUS replies too (nbdcopy and qemu-img ask for one per extent they copy): their extents
// are encoded into the request slot's own buffer, sent from there, and reused.
TEST(nbd_data_path, block_status_allocates_nothing_on_the_engine_thread) {
  engine_served e("nbd-alloc-map");
  // Every other block of the first 64 written: each status reply holds many extents.
  raw_client writer(e.socket());
  ASSERT_TRUE(open_all({&writer}));
  const auto payload = pattern(block, 5);
  for (uint64_t i = 0; i < 64; i += 2) {
    ASSERT_TRUE(writer.request(command::write, i, i * block, block));
    ASSERT_TRUE(writer.send(payload));
    auto r = writer.simple_reply();
    ASSERT_TRUE(r && r->first == 0);
  }
  raw_client c(e.socket());
  ASSERT_TRUE(c.start());
  ASSERT_EQ(c.ask(option::structured_reply), reply_type::ack);
  ASSERT_TRUE(c.option(static_cast<uint32_t>(option::set_meta_context),
                       meta_context_data("", {"base:allocation"})));
  auto chosen = c.reply();
  ASSERT_TRUE(chosen && chosen->type == reply_type::meta_context);
  ASSERT_EQ(c.reply()->type, reply_type::ack);
  ASSERT_TRUE(c.go());
  // depth requests of 16 blocks each, then their replies: 16 extents (4 + 16 x 8 bytes) each.
  auto round = [&](uint64_t r) {
    for (int i = 0; i < depth; ++i)
      if (!c.request(command::block_status, r * depth + i, (i % 4) * 16 * block, 16 * block))
        return false;
    for (int i = 0; i < depth; ++i) {
      auto h = c.recv(structured_reply_header_size);
      if (h.size() != structured_reply_header_size) return false;
      const uint32_t length = load_be32(h.data() + 16);
      if (length != 4 + 16 * 8 || c.recv(length).size() != length) return false;
    }
    return true;
  };
  uint64_t r = 0;
  for (; r < 50; ++r) ASSERT_TRUE(round(r));
  EXPECT_EQ(e.fewest_allocations(r, round), 0u)
      << "heap allocations on the engine thread in 1600 BLOCK_STATUS requests";
}

}  // namespace
}  // namespace zc::nbd::test
