// The rdma layer under a slow or hostile peer: nothing leaves after a task was given up on, a
// completion means the bytes are in place, arrival order holds for failures too, writes append as
// DOCA's do, and a process holding a connection's blobs cannot use that connection.
#include <cstdlib>
#include <cstring>
#include <string>

#include "rdma_fixture.hpp"

namespace zc::rdma::testing {
namespace {

using namespace std::chrono_literals;

// Messages above 16 KiB go by rendezvous in the UCX workers made while this lives (UCX reads its
// settings when a worker is made, on the engine threads, before the test goes on), so the tests
// below exercise rendezvous whatever UCX's own threshold for the transport.
class rendezvous_above_16k {
 public:
  rendezvous_above_16k() {
    if (const char* v = std::getenv("UCX_RNDV_THRESH")) saved_ = v;
    setenv("UCX_RNDV_THRESH", "16k", 1);
  }
  ~rendezvous_above_16k() {
    if (saved_.empty()) {
      unsetenv("UCX_RNDV_THRESH");
    } else {
      setenv("UCX_RNDV_THRESH", saved_.c_str(), 1);
    }
  }

 private:
  std::string saved_;
};

TEST_P(rdma_pair, timed_out_write_sends_nothing_afterwards) {
  a.task_timeout = 300ms;
  rendezvous_above_16k rendezvous;
  connect();
  constexpr size_t size = 256 * 1024;  // a rendezvous: the payload moves only when b asks for it
  std::thread stall = b.stall(2000ms);
  a.thread.call([&] {
    std::memset(a.region(), 0x11, size);
    a.submit<write_task>(0, [&](write_task& w) {
      w.set(*a.local_buffer(0, size, true), *a.remote_target(*a.remote, 0, size));
    });
  });
  ASSERT_TRUE(a.wait_for("write", 1, 5s));
  EXPECT_EQ(a.completions("write")[0].result, status::time_out);
  // The task is the caller's again: whatever it now holds must never reach the peer.
  a.thread.call([&] {
    EXPECT_EQ(a.ctx->failure(), status::time_out);
    EXPECT_NE(a.ctx->state(), core::context_state::running);
    std::memset(a.region(), 0xFD, size);  // a value b's pattern (i % 251) never has
  });
  stall.join();
  std::this_thread::sleep_for(1s);  // b's engine runs meanwhile: anything still coming lands now
  b.thread.call([&] {
    for (size_t i = 0; i < size; ++i) ASSERT_NE(b.region()[i], 0xFD) << "at byte " << i;
    EXPECT_TRUE(b.guards_intact());
  });
}

TEST_P(rdma_pair, write_completes_only_once_the_bytes_are_in_place) {
  a.task_timeout = 10s;  // longer than the stall: the write must wait for b, not give up
  connect();
  std::thread stall = b.stall(3000ms);
  a.thread.call([&] {
    std::memset(a.region(), 0x5C, 4096);
    a.submit<write_task>(0, [&](write_task& w) {
      w.set(*a.local_buffer(0, 4096, true), *a.remote_target(*a.remote, 8192, 4096));
    });
  });
  // The owner cannot have applied it: no completion may arrive while it is stalled.
  EXPECT_FALSE(a.wait_for("write", 1, 500ms));
  stall.join();
  ASSERT_TRUE(a.wait_for("write", 1));
  ASSERT_EQ(a.completions("write")[0].result, status::success);
  b.thread.call([&] {
    for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(b.region()[8192 + i], 0x5C) << "at byte " << i;
  });
}

// A receive matched to a rendezvous whose data never comes (the sender stalls after announcing
// it) is not left waiting forever: its deadline fails the connection.
TEST_P(rdma_pair, a_landing_rendezvous_receive_has_a_deadline) {
  if (GetParam() == "sm")
    GTEST_SKIP() << "on shared memory UCX fetches rendezvous data itself (CMA), stalled sender "
                    "or not";
  a.task_timeout = 300ms;
  b.task_timeout = 10s;
  rendezvous_above_16k rendezvous;
  connect();
  constexpr size_t size = 256 * 1024;
  // A first rendezvous completes normally: UCX wires up its rendezvous lanes lazily, and only
  // then does a send announce itself at once.
  a.thread.call([&] {
    a.submit<receive_task>(0, [&](receive_task& r) { r.set_dst(*a.local_buffer(0, size, false)); });
    a.submit<receive_task>(1,
                           [&](receive_task& r) { r.set_dst(*a.local_buffer(size, size, false)); });
  });
  b.thread.call([&] {
    b.submit<send_task>(0, [&](send_task& t) { t.set_src(*b.local_buffer(0, size, true)); });
  });
  ASSERT_TRUE(a.wait_for("receive", 1, 5s));
  ASSERT_EQ(a.completions("receive")[0].result, status::success);
  std::promise<void> sent;
  std::thread sender([&] {
    b.thread.call(
        [&] {
          b.submit<send_task>(0, [&](send_task& t) { t.set_src(*b.local_buffer(0, size, true)); });
          sent.set_value();
          std::this_thread::sleep_for(2s);  // announced, then silent
        },
        10s);
  });
  sent.get_future().wait();
  ASSERT_TRUE(a.wait_for("receive", 2, 5s));
  EXPECT_EQ(a.completions("receive")[1].result, status::time_out);
  a.thread.call([&] { EXPECT_EQ(a.ctx->failure(), status::time_out); });
  sender.join();
}

TEST_P(rdma_pair, message_too_big_completes_in_arrival_order) {
  rendezvous_above_16k rendezvous;
  connect();
  constexpr size_t big = 128 * 1024;  // rendezvous: lands after the next message has arrived
  b.thread.call([&] {
    b.submit<receive_task>(0, [&](receive_task& r) { r.set_dst(*b.local_buffer(0, big, false)); });
    b.submit<receive_task>(1, [&](receive_task& r) { r.set_dst(*b.local_buffer(big, 16, false)); });
  });
  a.thread.call([&] {
    a.submit<send_task>(0, [&](send_task& s) { s.set_src(*a.local_buffer(0, big, true)); });
    a.submit<send_task>(1, [&](send_task& s) { s.set_src(*a.local_buffer(0, 64, true)); });
  });
  ASSERT_TRUE(b.wait_for("receive", 2));
  auto got = b.completions("receive");
  EXPECT_EQ(got[0].task->get_user_data().u64, 0u);
  EXPECT_EQ(got[0].result, status::success);
  EXPECT_EQ(got[1].task->get_user_data().u64, 1u);
  EXPECT_EQ(got[1].result, status::too_big);
  ASSERT_TRUE(a.wait_for("send", 2));
  for (auto& c : a.completions("send"))
    EXPECT_EQ(c.result, c.task->get_user_data().u64 == 0 ? status::success : status::too_big);
}

TEST_P(rdma_pair, write_appends_after_the_destination_data) {
  connect();
  core::buffer* dst = nullptr;
  a.thread.call([&] {
    std::memset(a.region(), 0x77, 64);
    dst = a.remote_target(*a.remote, 4096, 1024);
    dst->set_data(dst->data(), 16);  // 16 bytes already there: the write goes after them
    a.submit<write_task>(0, [&](write_task& w) { w.set(*a.local_buffer(0, 64, true), *dst); });
  });
  ASSERT_TRUE(a.wait_for("write", 1));
  ASSERT_EQ(a.completions("write")[0].result, status::success);
  a.thread.call([&] { EXPECT_EQ(dst->data_length(), 80u); });
  b.thread.call([&] {
    for (size_t i = 0; i < 16; ++i)
      EXPECT_EQ(b.region()[4096 + i], static_cast<uint8_t>((4096 + i) % 251));
    for (size_t i = 16; i < 80; ++i) EXPECT_EQ(b.region()[4096 + i], 0x77) << "at byte " << i;
    EXPECT_EQ(b.region()[4096 + 80], static_cast<uint8_t>((4096 + 80) % 251));
  });
  // A write that does not fit after the data is refused before anything is sent.
  a.thread.call([&] {
    write_task* w = nullptr;
    ASSERT_EQ(a.ctx->allocate(core::make_user_data(1), w), status::success);
    core::buffer* full = a.remote_target(*a.remote, 8192, 64);
    full->set_data(full->data(), 32);
    w->set(*a.local_buffer(0, 64, true), *full);
    EXPECT_EQ(a.ctx->submit(*w), status::invalid_value);
    w->free();
  });
}

TEST_P(rdma_pair, sync_event_set_needs_a_local_source) {
  connect();
  a.thread.call([&] {
    auto event_blob = b.thread.call([&] { return b.event->export_remote(); });
    auto event = core::memory_map::import_rdma(event_blob);
    sync_event_set_task* t = nullptr;
    ASSERT_EQ(a.ctx->allocate(core::make_user_data(0), t), status::success);
    t->set(*event, *a.remote_buffer(*a.remote, 0, 8));
    EXPECT_EQ(a.ctx->submit(*t), status::invalid_value);
    t->free();
  });
}

// UCX pairs the endpoints between two workers by creation order, not by blob: two connections
// between the same two engines, made in opposite orders on the two sides, must both work.
TEST_P(rdma_pair, connections_made_in_opposite_orders_both_carry_their_messages) {
  connect();  // a.ctx <-> b.ctx, created first on both sides
  std::unique_ptr<context> a2, b2;
  int a2_done = 0, b2_done = 0;
  auto make = [&](side& s, std::unique_ptr<context>& c, int& done) {
    return s.thread.call([&] {
      c = std::make_unique<context>(s.thread.engine(), core::device::open(GetParam()));
      c->configure<receive_task>(
          4, [&](receive_task&) { ++done; }, [](receive_task&) {});
      c->configure<send_task>(
          4, [&](send_task&) { ++done; }, [](send_task&) {});
      EXPECT_EQ(c->start(), status::success);
      return c->export_connection();
    });
  };
  auto a2_blob = make(a, a2, a2_done);
  auto b2_blob = make(b, b2, b2_done);
  // A third pair on the same engines: b connects it now, a only after a fourth context has
  // taken the next endpoint on a's side.
  std::unique_ptr<context> a3, b3;
  int a3_done = 0, b3_done = 0;
  auto a3_blob = make(a, a3, a3_done);
  auto b3_blob = make(b, b3, b3_done);
  b.thread.call([&] {
    b2->connect(a2_blob);
    b3->connect(a3_blob);
  });
  a.thread.call([&] {
    a3->connect(b3_blob);  // opposite order on this side
    a2->connect(b2_blob);
  });
  for (auto* pair : {&a2, &a3}) {
    context& from = **pair;
    context& to = pair == &a2 ? *b2 : *b3;
    b.thread.call([&] {
      receive_task* r = nullptr;
      ASSERT_EQ(to.allocate(core::make_user_data(0), r), status::success);
      r->set_dst(*b.local_buffer(pair == &a2 ? 0 : 4096, 64, false));
      ASSERT_EQ(to.submit(*r), status::success);
    });
    a.thread.call([&] {
      send_task* t = nullptr;
      ASSERT_EQ(from.allocate(core::make_user_data(0), t), status::success);
      t->set_src(*a.local_buffer(0, 64, true));
      ASSERT_EQ(from.submit(*t), status::success);
    });
  }
  EXPECT_TRUE(a.thread.wait_until([&] { return a2_done == 1 && a3_done == 1; }, 5s));
  EXPECT_TRUE(b.thread.wait_until([&] { return b2_done == 1 && b3_done == 1; }, 5s));
  a.thread.call([&] {
    a2.reset();
    a3.reset();
  });
  b.thread.call([&] {
    b2.reset();
    b3.reset();
  });
}

// A third party that holds both of a's blobs (its connection and its export) gets nowhere: a only
// takes messages that name its peer's nonce, which only b's blob carries.
TEST_P(rdma_pair, a_party_holding_the_blobs_cannot_use_the_connection) {
  connect();
  side c;
  c.task_timeout = 500ms;
  c.create(GetParam(), core::rdma_all);
  auto a_export = a.thread.call([&] { return a.local->export_rdma(); });
  c.thread.call([&] {
    c.ctx->connect(a.conn_blob);
    c.remote = core::memory_map::import_rdma(a_export);
  });
  a.thread.call([&] {
    a.submit<receive_task>(0, [&](receive_task& r) { r.set_dst(*a.local_buffer(0, 64, false)); });
  });
  auto before = a.thread.call([&] { return std::vector<uint8_t>(a.region(), a.region() + 8192); });
  c.thread.call([&] {
    std::memset(c.region(), 0xCD, 4096);
    c.submit<write_task>(0, [&](write_task& w) {
      w.set(*c.local_buffer(0, 4096, true), *c.remote_target(*c.remote, 4096, 4096));
    });
    c.submit<send_task>(1, [&](send_task& s) { s.set_src(*c.local_buffer(0, 64, true)); });
  });
  ASSERT_TRUE(c.wait_for("write", 1, 5s));
  ASSERT_TRUE(c.wait_for("send", 1, 5s));
  EXPECT_NE(c.completions("write")[0].result, status::success);
  EXPECT_NE(c.completions("send")[0].result, status::success);
  EXPECT_EQ(a.count("receive"), 0u);
  a.thread.call([&] {
    EXPECT_EQ(std::memcmp(a.region(), before.data(), before.size()), 0);
    EXPECT_EQ(a.ctx->state(), core::context_state::running);
  });
  c.destroy();
}

}  // namespace
}  // namespace zc::rdma::testing
