// An rdma context against a peer that breaks the protocol on purpose (evil_peer.hpp: raw UCX).
// Whatever the peer sends, the context never misdelivers, never writes where it was not asked
// to, and gives up the connection rather than guess.
#include <cstring>
#include <future>
#include <thread>

#include "rdma/internal/context_hooks.hpp"

#include "evil_peer.hpp"
#include "rdma_fixture.hpp"

namespace zc::rdma::testing {
namespace {

using namespace std::chrono_literals;
using internal::op;

class hostile_peer : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    a.create(GetParam(), core::rdma_all);
    evil = std::make_unique<evil_peer>(GetParam());
    a.conn_blob = a.thread.call([&] { return a.ctx->export_connection(); });
    evil->connect(a.conn_blob);
    a.thread.call([&] { a.ctx->connect(evil->blob()); });
  }
  void TearDown() override {
    a.destroy();
    evil.reset();
  }
  bool failed_with(status why) {
    return a.thread.wait_until(
        [&] { return a.ctx->state() != core::context_state::running && a.ctx->failure() == why; },
        5s);
  }

  side a;
  std::unique_ptr<evil_peer> evil;
};

TEST_P(hostile_peer, a_gap_in_send_sequence_fails_the_connection) {
  a.thread.call([&] {
    for (int i = 0; i < 2; ++i)
      a.submit<receive_task>(
          i, [&](receive_task& r) { r.set_dst(*a.local_buffer(i * 64, 64, false)); });
  });
  std::vector<uint8_t> bytes(16, 0x42);
  ASSERT_TRUE(evil->send(evil->header(op::send, 1), bytes));
  ASSERT_TRUE(a.wait_for("receive", 1));
  EXPECT_EQ(a.completions("receive")[0].result, status::success);
  evil_peer::message ack;
  ASSERT_TRUE(evil->receive(op::ack_sends, ack));
  EXPECT_NE(ack.header.flags & internal::has_ack, 0);
  EXPECT_EQ(ack.header.acked, 1u);
  // Send 3 where 2 is due: matching by position would hand it to the second receive.
  std::fill(bytes.begin(), bytes.end(), 0x43);
  ASSERT_TRUE(evil->send(evil->header(op::send, 3), bytes));
  ASSERT_TRUE(failed_with(status::io_failed));
  ASSERT_TRUE(a.wait_for("receive", 2));
  auto second = a.completions("receive")[1];
  EXPECT_NE(second.result, status::success);
  EXPECT_EQ(static_cast<receive_task*>(second.task)->dst().data_length(), 0u);
}

TEST_P(hostile_peer, a_read_reply_naming_a_write_is_not_taken_for_it) {
  // The write's destination is an export of a's own memory, so a misdelivered reply would show.
  std::unique_ptr<core::memory_map> target;
  a.thread.call([&] {
    target = core::memory_map::import_rdma(a.local->export_rdma());
    std::memset(a.region(), 0x21, 64);
    a.submit<write_task>(0, [&](write_task& w) {
      w.set(*a.local_buffer(0, 64, true), *a.remote_target(*target, 4096, 64));
    });
  });
  evil_peer::message request;
  ASSERT_TRUE(evil->receive(op::write, request));
  auto before =
      a.thread.call([&] { return std::vector<uint8_t>(a.region(), a.region() + region_size); });
  auto forged = evil->header(op::read_reply, request.header.id);
  std::vector<uint8_t> payload(64, 0xEE);
  ASSERT_TRUE(evil->send(forged, payload));
  EXPECT_FALSE(a.wait_for("write", 1, 300ms));
  a.thread.call([&] {
    EXPECT_EQ(std::memcmp(a.region(), before.data(), before.size()), 0);
    EXPECT_TRUE(a.guards_intact());
  });
  // The real answer still completes it.
  auto ack = evil->header(op::ack_op, request.header.id);
  ASSERT_TRUE(evil->send(ack));
  ASSERT_TRUE(a.wait_for("write", 1));
  EXPECT_EQ(a.completions("write")[0].result, status::success);
  a.thread.call([&] { target.reset(); });
}

TEST_P(hostile_peer, an_unmatched_rendezvous_reply_is_released_not_pinned) {
  // A large payload goes by rendezvous: its sender's request ends only once the receiver takes
  // the data or lets it go. A reply nobody asked for must be let go.
  std::vector<uint8_t> payload(512 * 1024, 0x99);
  auto forged = evil->header(op::read_reply, (uint64_t(3) << 56) | 12345);
  EXPECT_TRUE(evil->send(forged, payload, 5s));
  a.thread.call([&] { EXPECT_EQ(a.ctx->state(), core::context_state::running); });
}

TEST_P(hostile_peer, an_ack_for_a_send_never_sent_fails_the_connection) {
  ASSERT_TRUE(evil->send(evil->header(op::ack_sends, 5)));
  EXPECT_TRUE(failed_with(status::io_failed));
}

TEST_P(hostile_peer, an_ack_riding_on_any_message_is_checked_like_one_alone) {
  // A read request that also claims to acknowledge send 7, when nothing was sent.
  auto h = evil->header(op::read, 1);
  h.flags = internal::has_ack;
  h.acked = 7;
  ASSERT_TRUE(evil->send(h));
  EXPECT_TRUE(failed_with(status::io_failed));
}

TEST_P(hostile_peer, an_ack_sends_without_has_ack_acknowledges_nothing) {
  // Names send 5, which was never made: taken as an acknowledgement, it would fail the
  // connection. Without has_ack it acknowledges nothing (the decoder drops it as malformed).
  auto h = evil->header(op::ack_sends, 5);
  h.flags = 0;
  ASSERT_TRUE(evil->send(h));
  // A round trip behind it on the same endpoint: once its answer is back, a has taken the
  // malformed message, and any failure it caused has been applied before the checks below.
  a.thread.call([&] {
    a.submit<receive_task>(0,
                           [&](receive_task& r) { r.set_dst(*a.local_buffer(4096, 64, false)); });
  });
  std::vector<uint8_t> bytes(16, 0x42);
  ASSERT_TRUE(evil->send(evil->header(op::send, 1), bytes));
  evil_peer::message ack;
  ASSERT_TRUE(evil->receive(op::ack_sends, ack));
  EXPECT_EQ(ack.header.acked, 1u);
  ASSERT_TRUE(a.wait_for("receive", 1));
  a.thread.call([&] {
    EXPECT_EQ(a.ctx->state(), core::context_state::running);
    EXPECT_EQ(a.ctx->failure(), status::success);
  });
  // Nothing changes: the message is dropped, the connection lives and still serves.
  a.thread.call([&] {
    a.submit<send_task>(0, [&](send_task& t) { t.set_src(*a.local_buffer(0, 64, true)); });
  });
  evil_peer::message sent;
  ASSERT_TRUE(evil->receive(op::send, sent));
  EXPECT_EQ(sent.header.seq, 1u);
  a.thread.call([&] { EXPECT_EQ(a.ctx->state(), core::context_state::running); });
}

TEST_P(hostile_peer, a_nack_carrying_an_ack_settles_the_earlier_send_first) {
  a.thread.call([&] {
    for (int i = 0; i < 2; ++i)
      a.submit<send_task>(i, [&](send_task& t) { t.set_src(*a.local_buffer(i * 64, 64, true)); });
  });
  evil_peer::message first, second;
  ASSERT_TRUE(evil->receive(op::send, first));
  ASSERT_TRUE(evil->receive(op::send, second));
  EXPECT_EQ(first.header.seq, 1u);
  EXPECT_EQ(second.header.seq, 2u);
  // One message: send 1 delivered, send 2 refused for want of a receive.
  auto nack = evil->header(op::nack_send, 2);
  nack.status = static_cast<uint32_t>(status::empty);
  nack.flags = internal::has_ack;
  nack.acked = 1;
  ASSERT_TRUE(evil->send(nack));
  ASSERT_TRUE(a.wait_for("send", 2));
  auto done = a.completions("send");
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].result, status::success);
  EXPECT_EQ(done[1].result, status::empty);
  a.thread.call([&] { EXPECT_EQ(a.ctx->state(), core::context_state::running); });
}

// An acknowledgement is final: a refusal of a send it covered would turn a success the caller
// was already given into a failure.
TEST_P(hostile_peer, a_nack_of_an_acknowledged_send_fails_the_connection) {
  a.thread.call([&] {
    for (int i = 0; i < 2; ++i)
      a.submit<send_task>(i, [&](send_task& t) { t.set_src(*a.local_buffer(i * 64, 64, true)); });
  });
  evil_peer::message sent;
  ASSERT_TRUE(evil->receive(op::send, sent));
  ASSERT_TRUE(evil->receive(op::send, sent));
  ASSERT_TRUE(evil->send(evil->header(op::ack_sends, 2)));
  ASSERT_TRUE(a.wait_for("send", 2));
  for (auto& c : a.completions("send")) EXPECT_EQ(c.result, status::success);
  auto nack = evil->header(op::nack_send, 1);
  nack.status = static_cast<uint32_t>(status::empty);
  ASSERT_TRUE(evil->send(nack));
  EXPECT_TRUE(failed_with(status::io_failed));
}

// One message that refuses a send and acknowledges it too: taken as an acknowledgement first,
// the send would complete with success and the refusal would be lost.
TEST_P(hostile_peer, a_nack_that_acknowledges_its_own_send_is_refused) {
  a.thread.call([&] {
    a.submit<send_task>(0, [&](send_task& t) { t.set_src(*a.local_buffer(0, 64, true)); });
  });
  evil_peer::message sent;
  ASSERT_TRUE(evil->receive(op::send, sent));
  auto nack = evil->header(op::nack_send, 1);
  nack.status = static_cast<uint32_t>(status::empty);
  nack.flags = internal::has_ack;
  nack.acked = 1;
  ASSERT_TRUE(evil->send(nack));
  EXPECT_TRUE(failed_with(status::io_failed));
  ASSERT_TRUE(a.wait_for("send", 1));
  EXPECT_EQ(a.completions("send")[0].result, status::io_failed);
}

// The acknowledgement a receive owes rides on the send its callback makes, in the same pass: no
// acknowledgement alone goes out first.
TEST_P(hostile_peer, an_ack_rides_on_the_send_a_receive_callback_makes) {
  a.thread.call([&] {
    a.submit<receive_task>(0,
                           [&](receive_task& r) { r.set_dst(*a.local_buffer(4096, 64, false)); });
    a.on_completion = [&](const completion& c) {
      if (c.kind != "receive") return;
      a.submit<send_task>(0, [&](send_task& t) { t.set_src(*a.local_buffer(0, 64, true)); });
    };
  });
  std::vector<uint8_t> bytes(16, 0x42);
  ASSERT_TRUE(evil->send(evil->header(op::send, 1), bytes));
  evil_peer::message first;
  ASSERT_TRUE(evil->receive(first));
  EXPECT_EQ(first.header.code, op::send) << "op " << static_cast<int>(first.header.code);
  EXPECT_NE(first.header.flags & internal::has_ack, 0);
  EXPECT_EQ(first.header.acked, 1u);
  a.thread.call([&] { a.on_completion = nullptr; });
}

// Refusals and acknowledgements keep their order even when a reply is still queued as the owed
// acknowledgement could ride out at once: checked where it matters, on the receiving side.
// UCX progressed outside the worker's poll (as a closing context does) takes a too-big send 1
// (refused: queued) and a send 2 (delivered: acknowledgement owed); a send of a's then goes out
// at once, and must not carry the acknowledgement of 2 ahead of the refusal of 1.
TEST_P(hostile_peer, an_ack_never_overtakes_a_queued_nack) {
  a.thread.call([&] {
    a.submit<receive_task>(0,
                           [&](receive_task& r) { r.set_dst(*a.local_buffer(4096, 16, false)); });
    a.submit<receive_task>(1,
                           [&](receive_task& r) { r.set_dst(*a.local_buffer(8192, 64, false)); });
  });
  std::promise<void> started;
  std::thread job([&] {
    a.thread.call([&] {
      started.set_value();
      auto give_up = std::chrono::steady_clock::now() + 5s;
      while (internal::context_hooks::last_received(*a.ctx) < 2 &&
             std::chrono::steady_clock::now() < give_up) {
        if (internal::context_hooks::progress_outside_poll(*a.ctx) == 0)
          std::this_thread::sleep_for(1ms);
      }
      EXPECT_EQ(internal::context_hooks::last_received(*a.ctx), 2u);
      a.submit<send_task>(0, [&](send_task& t) { t.set_src(*a.local_buffer(0, 64, true)); });
    });
  });
  started.get_future().wait();
  std::vector<uint8_t> too_big(32, 0x41), fits(16, 0x42);
  ASSERT_TRUE(evil->send(evil->header(op::send, 1), too_big));
  ASSERT_TRUE(evil->send(evil->header(op::send, 2), fits));
  job.join();
  // Everything a sends from here, in order, until the acknowledgement of 2 has been seen.
  bool refused = false;
  for (;;) {
    evil_peer::message m;
    ASSERT_TRUE(evil->receive(m)) << "no acknowledgement of send 2";
    if (m.header.code == op::nack_send) {
      EXPECT_EQ(m.header.seq, 1u);
      refused = true;
    }
    if ((m.header.flags & internal::has_ack) != 0 && m.header.acked >= 1) {
      EXPECT_TRUE(refused) << "an acknowledgement of " << m.header.acked << " (op "
                           << static_cast<int>(m.header.code) << ") overtook the refusal of 1";
      if (m.header.acked >= 2) break;
    }
  }
  ASSERT_TRUE(a.wait_for("receive", 2));
  auto got = a.completions("receive");
  EXPECT_EQ(got[0].result, status::too_big);
  EXPECT_EQ(got[1].result, status::success);
}

// A header shorter than its op needs is dropped whatever it says (here: each op's header less
// one byte, then a single byte): the connection lives and nothing happened.
TEST_P(hostile_peer, short_headers_are_dropped) {
  for (op code : {op::send, op::write, op::read, op::read_reply, op::atomic, op::ack_sends,
                  op::nack_send, op::ack_op, op::disconnect}) {
    auto h = evil->header(code, 1);
    h.flags |= internal::has_ack;
    h.acked = 9;  // never sent: taken, it would fail the connection
    h.length = 8;
    ASSERT_TRUE(evil->send_prefix(h, internal::header_size_for(code) - 1))
        << "op " << static_cast<int>(code);
  }
  ASSERT_TRUE(evil->send_prefix(evil->header(op::disconnect, 0), 1));
  // A round trip behind them: its answer proves a has taken them all.
  a.thread.call([&] {
    a.submit<receive_task>(0,
                           [&](receive_task& r) { r.set_dst(*a.local_buffer(4096, 64, false)); });
  });
  std::vector<uint8_t> bytes(16, 0x42);
  ASSERT_TRUE(evil->send(evil->header(op::send, 1), bytes));
  evil_peer::message answer;
  ASSERT_TRUE(evil->receive(answer));
  EXPECT_EQ(answer.header.code, op::ack_sends) << "op " << static_cast<int>(answer.header.code);
  EXPECT_EQ(answer.header.acked, 1u);
  ASSERT_TRUE(a.wait_for("receive", 1));
  EXPECT_EQ(a.completions("receive")[0].result, status::success);
  a.thread.call([&] {
    EXPECT_EQ(a.ctx->state(), core::context_state::running);
    EXPECT_EQ(a.ctx->failure(), status::success);
  });
}

TEST_P(hostile_peer, a_nack_for_a_send_far_ahead_fails_the_connection) {
  a.thread.call([&] {
    a.submit<send_task>(0, [&](send_task& t) { t.set_src(*a.local_buffer(0, 64, true)); });
  });
  evil_peer::message sent;
  ASSERT_TRUE(evil->receive(op::send, sent));
  // Sequence numbers travel as 32 bits: 2^31 ahead of the last send is not "long ago".
  auto nack = evil->header(op::nack_send, 1u + (1u << 31));
  nack.status = static_cast<uint32_t>(status::empty);
  ASSERT_TRUE(evil->send(nack));
  EXPECT_TRUE(failed_with(status::io_failed));
}

TEST_P(hostile_peer, a_write_needs_the_exports_own_key) {
  core::remote_region region;
  a.thread.call([&] { region = core::memory_map::import_rdma(a.local->export_rdma())->remote(); });
  std::vector<uint8_t> payload(32, 0xAA);
  auto h = evil->header(op::write, 77);
  h.export_id = region.export_id;
  h.export_key = region.key ^ 1;
  h.offset = 128;
  h.length = payload.size();
  ASSERT_TRUE(evil->send(h, payload));
  evil_peer::message answer;
  ASSERT_TRUE(evil->receive(op::ack_op, answer));
  EXPECT_EQ(status_from_wire(answer.header.status), status::not_permitted);
  a.thread.call([&] { EXPECT_NE(a.region()[128], 0xAA); });
  h.export_key = region.key;
  ASSERT_TRUE(evil->send(h, payload));
  ASSERT_TRUE(evil->receive(op::ack_op, answer));
  EXPECT_EQ(status_from_wire(answer.header.status), status::success);
  a.thread.call([&] { EXPECT_EQ(a.region()[128], 0xAA); });
}

INSTANTIATE_TEST_SUITE_P(transports, hostile_peer, ::testing::Values("tcp", "sm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace zc::rdma::testing
