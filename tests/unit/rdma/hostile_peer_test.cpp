// An rdma context against a peer that breaks the protocol on purpose (evil_peer.hpp: raw UCX).
// Whatever the peer sends, the context never misdelivers, never writes where it was not asked
// to, and gives up the connection rather than guess.
#include <cstring>

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
