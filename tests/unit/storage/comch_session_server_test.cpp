// The comch session server (--max-sessions): every client its own channel, on its own session
// thread, while one thread runs the comch server; a client beyond the limit answered in_use and
// closed; a session that ends frees its place; a lost client is its own session's news only; a
// client that floods its session is closed with the reason.
#include "storage/comch_session_server.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "comch/client.hpp"
#include "support/subprocess.hpp"

namespace zc::storage {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

// Generous bound for every wait: a slow CI machine fails late, never hangs.
constexpr auto wait_limit = 10s;

message query(uint32_t id) {
  return {message_type::query_storage_request, id, id, empty_payload{}};
}

// The server, run on its own thread as a service's control thread runs it. Channels taken from it
// must be destroyed first (declare them after the hub).
struct hub {
  explicit hub(uint32_t max_sessions)
      : server("", name, max_sessions),
        runner([this] { server.run([this] { return done.load(); }); }) {}
  ~hub() {
    done = true;
    server.wake();
    runner.join();
  }
  std::unique_ptr<comch_control_client> connect() {
    return std::make_unique<comch_control_client>("auto", name, clock::now() + wait_limit);
  }
  std::unique_ptr<comch_session_channel> take() { return server.next_client(wait_limit); }

  std::string name = zc::test::unique_name("session-hub");
  comch_session_server server;
  std::atomic<bool> done{false};
  std::thread runner;
};

// Sends `id` from `client`, answers it on `session`, and checks the answer came back to `client`.
void round_trip(comch_control_client& client, comch_session_channel& session, uint32_t id) {
  ASSERT_EQ(client.send(query(id)), status::success) << client.last_error();
  receive_result got = wait_for(session, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, id);
  ASSERT_EQ(session.send(make_response(*got.msg, message_type::query_storage_response,
                                       query_storage_response_payload{32768, 4096})),
            status::success)
      << session.last_error();
  got = wait_for(client, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->type, message_type::query_storage_response);
  EXPECT_EQ(got.msg->correlation_id, id);
}

// `client`'s request `id` is answered in_use with a text holding `reason`, then the connection
// closes: the answer is all a refused client gets.
void expect_refused(comch_control_client& client, uint32_t id, const std::string& reason,
                    std::chrono::milliseconds within) {
  receive_result got = wait_for(client, within);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->type, message_type::error_response);
  EXPECT_EQ(got.msg->correlation_id, id);
  const auto* error = std::get_if<error_response_payload>(&got.msg->payload);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->error_code, status::in_use);
  EXPECT_NE(error->message.find(reason), std::string::npos) << error->message;
  got = wait_for(client, wait_limit);
  EXPECT_EQ(got.code, status::connection_reset) << got.text;
}

TEST(comch_session_server, two_clients_each_get_their_own_channel) {
  hub h(2);
  auto first = h.connect();
  auto first_session = h.take();
  ASSERT_TRUE(first_session);
  auto second = h.connect();
  auto second_session = h.take();
  ASSERT_TRUE(second_session);
  EXPECT_TRUE(first_session->is_connected() && second_session->is_connected());
  EXPECT_NE(first_session->connection(), second_session->connection());

  // Each request reaches its own session only, and each answer its own client only.
  ASSERT_EQ(first->send(query(1)), status::success);
  ASSERT_EQ(second->send(query(2)), status::success);
  receive_result a = wait_for(*first_session, wait_limit);
  receive_result b = wait_for(*second_session, wait_limit);
  ASSERT_TRUE(a.msg && b.msg) << a.text << b.text;
  EXPECT_EQ(a.msg->message_id, 1u);
  EXPECT_EQ(b.msg->message_id, 2u);
  EXPECT_EQ(wait_for(*first_session, 50ms).code, status::time_out);
  ASSERT_EQ(second_session->send(make_response(*b.msg, message_type::query_storage_response,
                                               query_storage_response_payload{32768, 4096})),
            status::success);
  EXPECT_EQ(wait_for(*first, 100ms).code, status::time_out);
  receive_result answer = wait_for(*second, wait_limit);
  ASSERT_TRUE(answer.msg) << answer.text;
  EXPECT_EQ(answer.msg->correlation_id, 2u);
  round_trip(*first, *first_session, 3);
  EXPECT_EQ(h.server.refused_clients(), 0u);
}

TEST(comch_session_server, a_client_beyond_the_limit_is_answered_in_use_then_closed) {
  hub h(1);
  auto first = h.connect();
  auto first_session = h.take();
  ASSERT_TRUE(first_session);
  auto intruder = h.connect();
  ASSERT_EQ(intruder->send(query(7)), status::success);
  expect_refused(*intruder, 7, "its limit (--max-sessions 1)", wait_limit);
  EXPECT_EQ(h.server.refused_clients(), 1u);
  EXPECT_EQ(h.server.next_client(50ms), nullptr);  // never handed to a session
  round_trip(*first, *first_session, 8);
}

TEST(comch_session_server, a_session_that_ends_frees_its_place) {
  hub h(1);
  auto first = h.connect();
  auto first_session = h.take();
  ASSERT_TRUE(first_session);
  first_session.reset();  // the session ended: its client is closed
  EXPECT_EQ(wait_for(*first, wait_limit).code, status::connection_reset);
  auto next = h.connect();
  auto next_session = h.take();
  ASSERT_TRUE(next_session);
  round_trip(*next, *next_session, 4);
  EXPECT_EQ(h.server.refused_clients(), 0u);
}

TEST(comch_session_server, a_lost_client_is_reported_to_its_own_session_only) {
  hub h(2);
  auto first = h.connect();
  auto first_session = h.take();
  auto second = h.connect();
  auto second_session = h.take();
  ASSERT_TRUE(first_session && second_session);
  ASSERT_EQ(first->send(query(5)), status::success);
  first.reset();
  // What it sent before it went is still delivered, then the loss.
  receive_result got = wait_for(*first_session, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, 5u);
  got = wait_for(*first_session, wait_limit);
  EXPECT_EQ(got.code, status::connection_reset);
  EXPECT_NE(got.text.find("closed the connection"), std::string::npos) << got.text;
  EXPECT_FALSE(first_session->is_connected());
  EXPECT_EQ(first_session->connection(), nullptr);
  EXPECT_NE(first_session->send(query(6)), status::success);
  round_trip(*second, *second_session, 9);
}

TEST(comch_session_server, a_client_flooding_its_session_is_closed_with_the_reason) {
  hub h(1);
  auto client = h.connect();
  auto session = h.take();
  ASSERT_TRUE(session);
  // The session reads nothing while its client sends more than the server keeps for it.
  uint32_t sent = 0;
  const auto deadline = clock::now() + wait_limit;
  while (sent < max_unread_messages + default_max_queued_sends + 16 && clock::now() < deadline) {
    const status s = client->send(query(sent));
    if (s == status::success) {
      ++sent;
    } else if (s == status::full) {
      (void)wait_for(*client, 1ms);  // lets the queued sends go out
    } else {
      break;  // the server saw the flood and closed the connection already
    }
  }
  // What the client queued is out (or failed with the connection) before the session reads.
  while (client->queued_sends() != 0 && clock::now() < deadline) (void)wait_for(*client, 1ms);
  ASSERT_GT(sent, max_unread_messages);
  // The server has taken the flood in (and closed the client) before the session reads: a session
  // reading while the flood is still in the socket would keep up with it (a slow machine).
  for (;;) {
    const receive_result r = wait_for(*client, 10ms);
    if ((r.failed() && r.code != status::time_out) || clock::now() >= deadline) break;
  }
  size_t read = 0;
  receive_result got;
  for (;;) {
    got = wait_for(*session, wait_limit);
    if (!got.msg) break;
    ++read;
  }
  // The session may read while the flood still arrives; it never gets the whole flood.
  EXPECT_GE(read, max_unread_messages);
  EXPECT_LT(read, sent);
  EXPECT_EQ(got.code, status::connection_reset);
  EXPECT_NE(got.text.find("messages its session has not read"), std::string::npos) << got.text;
}

// A client that never reads its socket holds at most its share of the server's send tasks: the
// other sessions' answers still go out at once.
TEST(comch_session_server, a_client_that_never_reads_does_not_hold_up_the_others) {
  hub h(2);
  // A raw comch client: it connects and never progresses again, so nothing it is sent is read.
  core::progress_engine engine(core::poll_mode::event);
  comch::client staller(engine, comch::client_config{.name = h.name});
  ASSERT_EQ(staller.start(), status::success);
  const auto deadline = clock::now() + wait_limit;
  while (staller.state() != core::context_state::running && clock::now() < deadline)
    engine.run_until([&] { return staller.state() == core::context_state::running; }, 10ms);
  ASSERT_EQ(staller.state(), core::context_state::running);
  auto stalled = h.take();
  ASSERT_TRUE(stalled);
  auto client = h.connect();
  auto session = h.take();
  ASSERT_TRUE(session);
  // The stalled session answers until its client's socket is full and its own queue stays full
  // (nothing has moved for 200 ms): the comch sends to that client are stuck in flight.
  storage::message request = query(1);
  size_t answered = 0;
  int full_in_a_row = 0;
  while (full_in_a_row < 40 && answered < 1'000'000 && clock::now() < deadline) {
    const status s = stalled->send(make_response(request, message_type::query_storage_response,
                                                 query_storage_response_payload{32768, 4096}));
    if (ok(s)) {
      ++answered;
      full_in_a_row = 0;
      continue;
    }
    ASSERT_EQ(s, status::full) << stalled->last_error();
    ++full_in_a_row;
    (void)wait_for(*stalled, 5ms);
  }
  ASSERT_EQ(full_in_a_row, 40) << answered << " answers sent";
  // The other client is still answered, at once.
  for (uint32_t id = 10; id < 30; ++id) round_trip(*client, *session, id);
  stalled.reset();
  (void)staller.stop();
  engine.run_until([&] { return staller.state() == core::context_state::idle; }, wait_limit);
}

// An accepted client that no session thread takes (every one busy) is refused with that reason
// once admission_wait passed, never left waiting in silence.
TEST(comch_session_server, a_client_no_session_takes_is_refused_with_the_reason) {
  hub h(2);
  auto client = h.connect();
  ASSERT_EQ(client->send(query(21)), status::success);
  // No next_client() call: every session thread is busy.
  expect_refused(*client, 21, "no session of the service was ready", admission_wait + wait_limit);
  EXPECT_EQ(h.server.next_client(50ms), nullptr);
  EXPECT_EQ(h.server.refused_clients(), 1u);
}

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Clients that connect and leave while no session thread takes them (every one busy) are
// forgotten as they leave: nothing they held (their descriptors, the connection) stays behind,
// long before the admission wait would refuse them.
TEST(comch_session_server, clients_that_leave_while_waiting_leave_nothing_behind) {
  hub h(64);
  const size_t before = open_descriptors();
  const auto started = clock::now();
  for (int i = 0; i < 32; ++i) h.connect().reset();
  // Well inside admission_wait, which would otherwise clean them up too.
  size_t now = open_descriptors();
  while (now > before && clock::now() < started + admission_wait / 2) {
    std::this_thread::sleep_for(10ms);
    now = open_descriptors();
  }
  ASSERT_LT(clock::now(), started + admission_wait) << "the clients took too long to connect";
  EXPECT_LE(now, before);
  EXPECT_EQ(h.server.next_client(50ms), nullptr);
}

TEST(comch_session_server, max_sessions_outside_its_range_is_refused) {
  const std::string name = zc::test::unique_name("session-hub");
  for (uint32_t bad : {0u, max_sessions_limit + 1}) {
    try {
      comch_session_server server("", name, bad);
      ADD_FAILURE() << bad << " accepted";
    } catch (const status_error& e) {
      EXPECT_EQ(e.code(), status::bad_config) << e.what();
    }
  }
}

}  // namespace
}  // namespace zc::storage
