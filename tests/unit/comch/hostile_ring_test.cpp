// The fast path against a peer process that does not play by the rules of the shared-memory
// queue (zc_comch_ring_peer, ring_peer.cpp): a producer that claims a buffer and is slow to fill
// it or dies, and peers that write lies — lengths, heads, buffer offsets — into the queue. Our
// side must never hand back a buffer the peer may still be writing, never read or write outside
// its buffers, and fail the consumer or the send with a clear status.
#include <signal.h>

#include <deque>
#include <limits>
#include <map>
#include <sstream>

#include "comch_test_support.hpp"

namespace zc::comch::test {
namespace {

using zc::test::subprocess;

// A server in this process whose one client is the ring peer, driven by control messages.
struct comch_hostile_ring : ::testing::Test {
  void SetUp() override {
    srv.emplace(engine,
                server_config{.name = channel_name(),
                              .on_send_done = [](send_task& t) { t.free(); },
                              .on_send_error = [](send_task& t) { t.free(); },
                              .events = {.on_message =
                                             [this](connection&, std::span<const uint8_t> m) {
                                               std::string text = string_of(m);
                                               if (text.rfind("mapped ", 0) == 0)
                                                 mapped.push_back(std::move(text));
                                               else
                                                 replies.push_back(std::move(text));
                                             },
                                         .on_consumer_new =
                                             [this](connection&, uint32_t id) {
                                               peer_consumers.push_back(id);
                                             }},
                              .on_connect = [this](connection& c) { conn = &c; },
                              .on_disconnect = [this](connection&) { conn = nullptr; }});
    ASSERT_EQ(srv->start(), status::success);
    peer.emplace(std::vector<std::string>{std::string(ZC_BINARY_DIR) + "/tests/zc_comch_ring_peer",
                                          "--socket", srv->socket_path()});
    ASSERT_TRUE(run([&] { return conn != nullptr; })) << peer->output();
  }
  void TearDown() override {
    if (srv->state() != context_state::idle) srv->stop();
    EXPECT_TRUE(run([&] { return srv->state() == context_state::idle; }));
  }
  template <typename Done>
  bool run(Done&& done, std::chrono::milliseconds bound = wait_limit) {
    return engine.run_until(done, bound);
  }
  // Sends a command to the peer and waits for its answer.
  std::string ask(const std::string& command) {
    if (conn == nullptr) return "no peer";
    const size_t before = replies.size();
    commands.push_back(command);  // the bytes must live until the send completes
    send_task* t = srv->allocate_send(*conn, bytes_of(commands.back()));
    if (t == nullptr || srv->submit(*t) != status::success) return "not sent";
    if (!run([&] { return replies.size() > before; })) return "no answer: " + peer->output();
    return replies[before];
  }
  // The peer maps our consumer from its announcement; commands about it must come after.
  void announce(consumer& rx) {
    ASSERT_EQ(rx.start(), status::success);
    const std::string expected = "mapped " + std::to_string(rx.id());
    ASSERT_TRUE(run([&] { return !mapped.empty() && mapped.back() == expected; }))
        << peer->output();
  }

  core::progress_engine engine{core::poll_mode::event};
  std::optional<server> srv;
  std::optional<subprocess> peer;
  connection* conn = nullptr;
  std::vector<std::string> replies;  // to commands, in order
  std::vector<std::string> mapped;   // "mapped <id>": the peer has mapped our consumer <id>
  std::deque<std::string> commands;
  std::vector<uint32_t> peer_consumers;
};

// What came back, buffer by buffer.
struct returns {
  std::map<core::buffer*, status> status_of;
  std::vector<std::string> texts;
  consumer_config config(core::memory_map& map, uint32_t tasks) {
    return {
        .buffers = &map,
        .post_recv_tasks = tasks,
        .on_recv =
            [this](consumer_post_recv_task& t) {
              status_of[&t.buf()] = status::success;
              texts.push_back(text_of(t.buf()));
            },
        .on_recv_error = [this](consumer_post_recv_task& t) { status_of[&t.buf()] = t.result(); }};
  }
  bool returned(core::buffer* b) const { return status_of.count(b) != 0; }
};

void post_all(consumer& rx, buffer_set& set) {
  for (core::buffer* b : set.buffers) {
    auto* t = rx.allocate_post_recv(*b);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(rx.submit(*t), status::success);
  }
}

// Long enough for a stop to have handed the buffer back if it were going to (it did so after a
// 100 ms grace before): the test asserts that it has not.
constexpr std::chrono::milliseconds while_still_writing{300};

// ---- a producer that claimed a buffer ---------------------------------------------------------

TEST_F(comch_hostile_ring, stop_waits_for_a_producer_still_writing_into_a_claimed_buffer) {
  buffer_set rx_mem(2, 64);
  returns got;
  consumer rx(engine, *conn, got.config(*rx_mem.map, 2));
  announce(rx);
  post_all(rx, rx_mem);
  ASSERT_EQ(ask("claim"), "claimed 0");  // the peer is "copying" into buffer 0 from now on

  rx.stop();
  EXPECT_FALSE(run([&] { return got.returned(rx_mem.buffers[0]); }, while_still_writing))
      << "buffer 0 was handed back while the peer could still write into it";
  EXPECT_EQ(rx.state(), context_state::stopping);
  // The buffer nobody claimed is revoked and handed back at once.
  EXPECT_EQ(got.status_of[rx_mem.buffers[1]], status::shutdown);

  ASSERT_EQ(ask("fill 0 written late"), "filled 0");
  ASSERT_TRUE(run([&] { return rx.state() == context_state::idle; }));
  EXPECT_EQ(got.status_of[rx_mem.buffers[0]], status::success);
  EXPECT_EQ(got.texts, std::vector<std::string>{"written late"});
}

TEST_F(comch_hostile_ring, stop_hands_a_claimed_buffer_back_once_its_producer_is_gone) {
  buffer_set rx_mem(2, 64);
  returns got;
  consumer rx(engine, *conn, got.config(*rx_mem.map, 2));
  announce(rx);
  post_all(rx, rx_mem);
  ASSERT_EQ(ask("claim"), "claimed 0");

  rx.stop();
  EXPECT_FALSE(run([&] { return got.returned(rx_mem.buffers[0]); }, while_still_writing))
      << "buffer 0 was handed back while its producer was alive";
  peer->signal(SIGKILL);  // dies mid-copy: its socket closes, the connection goes
  ASSERT_TRUE(run([&] { return rx.state() == context_state::idle; }));
  EXPECT_EQ(got.status_of[rx_mem.buffers[0]], status::connection_reset);
  EXPECT_TRUE(got.texts.empty());
}

// ---- lies told to a consumer ------------------------------------------------------------------

TEST_F(comch_hostile_ring, a_fill_longer_than_its_buffer_fails_the_consumer) {
  // "head:" is already in the buffer, so 59 bytes of room are left. The second lie makes
  // 5 + length wrap around to 0, which a check of the sum alone lets through.
  for (uint64_t lie : {uint64_t{60}, std::numeric_limits<uint64_t>::max() - 4}) {
    SCOPED_TRACE(lie);
    buffer_set rx_mem(2, 64);
    for (core::buffer* b : rx_mem.buffers) fill(*b, "head:");
    returns got;
    consumer rx(engine, *conn, got.config(*rx_mem.map, 2));
    announce(rx);
    post_all(rx, rx_mem);
    ASSERT_EQ(ask("claim"), "claimed 0");
    ASSERT_EQ(ask("publish 0 " + std::to_string(lie)), "published 0");

    ASSERT_TRUE(run([&] { return rx.state() == context_state::idle; }));
    EXPECT_TRUE(got.texts.empty()) << "a lie was delivered as data";
    for (core::buffer* b : rx_mem.buffers) {
      EXPECT_EQ(got.status_of[b], status::invalid_value);
      EXPECT_EQ(text_of(*b), "head:") << "the buffer descriptor was moved";
    }
  }
}

TEST_F(comch_hostile_ring, a_head_moved_past_the_posted_buffers_does_not_hold_up_the_stop) {
  buffer_set rx_mem(2, 64);
  returns got;
  consumer rx(engine, *conn, got.config(*rx_mem.map, 2));
  announce(rx);
  post_all(rx, rx_mem);
  // Says 1000 buffers were claimed where 2 were posted: none of its claims can be believed.
  ASSERT_EQ(ask("set-head 1000"), "head 1000");
  rx.stop();
  ASSERT_TRUE(run([&] { return rx.state() == context_state::idle; }));
  for (core::buffer* b : rx_mem.buffers) EXPECT_EQ(got.status_of[b], status::invalid_value);
}

// ---- lies told to a producer ------------------------------------------------------------------

TEST_F(comch_hostile_ring, a_consumer_offering_memory_outside_its_map_gets_nothing_written) {
  buffer_set tx_mem(1, 64, core::access::local_read_write);
  fill(*tx_mem.buffers[0], "sixteen bytes...");
  std::vector<status> errors;
  int done = 0;
  producer tx(engine, *conn,
              {.send_tasks = 1,
               .on_send_done = [&](producer_send_task& t) { ++done, t.free(); },
               .on_send_error =
                   [&](producer_send_task& t) {
                     errors.push_back(t.result());
                     t.free();
                   }});
  ASSERT_EQ(tx.start(), status::success);
  // Its receive memory is 4096 bytes: runs past the end, starts past it, wraps around.
  const std::string lies[] = {"announce 4088 64", "announce 4096 16",
                              "announce 8 18446744073709551615",
                              "announce 18446744073709551615 16"};
  for (const std::string& lie : lies) {
    SCOPED_TRACE(lie);
    const size_t before = peer_consumers.size();
    const std::string answer = ask(lie);
    ASSERT_EQ(answer.rfind("announced ", 0), 0u) << answer;
    ASSERT_TRUE(run([&] { return peer_consumers.size() > before; }));
    const uint32_t id = peer_consumers.back();

    errors.clear();
    ASSERT_EQ(tx.submit(*tx.allocate_send(*tx_mem.buffers[0], id)), status::success);
    ASSERT_TRUE(run([&] { return errors.size() == 1; }));
    EXPECT_EQ(errors[0], status::invalid_value);
    EXPECT_EQ(ask("untouched"), "untouched");
    // A queue that lied once is not used again.
    auto* again = tx.allocate_send(*tx_mem.buffers[0], id);
    EXPECT_EQ(tx.submit(*again), status::not_found);
    again->free();
  }
  EXPECT_EQ(done, 0);
  tx.stop();
  ASSERT_TRUE(run([&] { return tx.state() == context_state::idle; }));
}

}  // namespace
}  // namespace zc::comch::test
