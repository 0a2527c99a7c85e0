// Comch between two processes (the other one is zc_comch_channel_peer): control messages and
// the fast path both ways, peers killed mid-stream, and peers of another user.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "comch/address.hpp"
#include "comch_test_support.hpp"

namespace zc::comch::test {
namespace {

using zc::test::subprocess;

// Our side of a fast path: a consumer that keeps its buffers posted, and a producer.
struct local_fast_path {
  local_fast_path(core::progress_engine& pe, connection& conn)
      : rx_mem(16, 256),
        tx_mem(16, 256, core::access::local_read_write),
        rx(pe, conn,
           {.buffers = rx_mem.map.get(),
            .post_recv_tasks = 16,
            .on_recv =
                [this](consumer_post_recv_task& t) {
                  got.push_back(text_of(t.buf()));
                  t.buf().set_data(t.buf().head(), 0);
                  if (rx.state() == context_state::running) rx.submit(t);
                },
            .on_recv_error =
                [this](consumer_post_recv_task& t) { rx_errors.push_back(t.result()); }}),
        tx(pe, conn,
           {.send_tasks = 16,
            .on_send_done = [this](producer_send_task& t) { ++sent, t.free(); },
            .on_send_error =
                [this](producer_send_task& t) {
                  tx_errors.push_back(t.result());
                  t.free();
                }}) {
    EXPECT_EQ(rx.start(), status::success);
    EXPECT_EQ(tx.start(), status::success);
    for (core::buffer* b : rx_mem.buffers)
      EXPECT_EQ(rx.submit(*rx.allocate_post_recv(*b)), status::success);
  }
  bool idle() const {
    return rx.state() == context_state::idle && tx.state() == context_state::idle;
  }
  buffer_set rx_mem, tx_mem;
  consumer rx;
  producer tx;
  std::vector<std::string> got;
  std::vector<status> rx_errors, tx_errors;
  int sent = 0;
};

uint32_t announced_id(const std::string& output) {
  auto at = output.find("consumer=");
  return at == std::string::npos ? 0 : uint32_t(std::stoul(output.substr(at + 9)));
}

// A server in this process with one fast path per connection.
struct local_server {
  local_server()
      : srv(engine,
            {.name = name,
             .on_send_done = [this](send_task& t) { t.free(); },
             .on_send_error = [this](send_task& t) { t.free(); },
             .events = {.on_message =
                            [this](connection&, std::span<const uint8_t> m) {
                              messages.push_back(string_of(m));
                            },
                        .on_consumer_new = [this](connection&,
                                                  uint32_t id) { peer_consumers.push_back(id); },
                        .on_consumer_expired = [this](connection&,
                                                      uint32_t id) { expired.push_back(id); }},
             .on_connect =
                 [this](connection& c) {
                   conn = &c;
                   ++connects;
                   path = std::make_unique<local_fast_path>(engine, c);
                 },
             .on_disconnect =
                 [this](connection&) {
                   conn = nullptr;
                   ++disconnects;
                 }}) {
    EXPECT_EQ(srv.start(), status::success);
  }
  ~local_server() {
    if (path) {
      path->rx.stop();
      path->tx.stop();
    }
    srv.stop();
    engine.run_until([&] { return srv.state() == context_state::idle && (!path || path->idle()); },
                     wait_limit);
  }
  template <typename Done>
  bool run(Done&& done) {
    return engine.run_until(done, wait_limit);
  }
  core::progress_engine engine{core::poll_mode::event};
  std::string name = channel_name();
  std::vector<std::string> messages;
  std::vector<uint32_t> peer_consumers, expired;
  connection* conn = nullptr;
  int connects = 0, disconnects = 0;
  std::unique_ptr<local_fast_path> path;
  server srv;
};

TEST(comch_cross_process, client_in_another_process_exchanges_messages_and_fast_path_data) {
  local_server s;
  subprocess peer({peer_path(), "client", "--name", s.name});
  ASSERT_TRUE(s.run([&] { return s.conn != nullptr && s.peer_consumers.size() == 1; }))
      << peer.output();
  EXPECT_EQ(s.conn->peer_pid(), peer.pid());
  ASSERT_TRUE(peer.wait_for_output("READY", wait_limit));
  EXPECT_EQ(s.peer_consumers[0], announced_id(peer.output()));

  // Control path: the peer echoes.
  std::string ping = "ping across processes";
  ASSERT_EQ(s.srv.submit(*s.srv.allocate_send(*s.conn, bytes_of(ping))), status::success);
  ASSERT_TRUE(s.run([&] { return s.messages.size() == 1; })) << peer.output();
  EXPECT_EQ(s.messages[0], ping);

  // Fast path: our producer -> their consumer -> their producer -> our consumer, in order.
  constexpr int count = 200;
  int next = 0;
  ASSERT_TRUE(s.run([&] {
    while (next < count) {
      core::buffer& b = *s.path->tx_mem.buffers[size_t(next) % s.path->tx_mem.buffers.size()];
      fill(b, "fp " + std::to_string(next));
      auto* t = s.path->tx.allocate_send(b, s.peer_consumers[0]);
      if (t == nullptr) break;
      status st = s.path->tx.submit(*t);
      if (st == status::again) {
        t->free();
        break;
      }
      EXPECT_EQ(st, status::success);
      ++next;
    }
    return s.path->got.size() == size_t(count);
  })) << peer.output();
  for (int i = 0; i < count; ++i) EXPECT_EQ(s.path->got[size_t(i)], "fp " + std::to_string(i));
  EXPECT_TRUE(s.path->tx_errors.empty());

  // Stopping the server takes the peer client out of running.
  s.srv.stop();
  ASSERT_TRUE(peer.wait_for_output("CLIENT_LEFT_RUNNING", wait_limit)) << peer.output();
  EXPECT_EQ(peer.wait(wait_limit), std::optional<int>(0)) << peer.output();
}

TEST(comch_cross_process, client_killed_mid_stream_gives_a_disconnect_and_expires_its_consumers) {
  local_server s;
  uint32_t dead_consumer = 0;
  {
    subprocess peer({peer_path(), "client", "--name", s.name, "--stream"});
    ASSERT_TRUE(s.run([&] { return s.path && s.path->got.size() >= 200; })) << peer.output();
    dead_consumer = s.peer_consumers.at(0);
    // The peer is streaming: kill it without warning.
    ::kill(peer.pid(), SIGKILL);
    ASSERT_TRUE(peer.wait(wait_limit).has_value());
  }
  ASSERT_TRUE(s.run([&] { return s.disconnects == 1 && s.path->idle(); }));
  EXPECT_EQ(s.expired, std::vector<uint32_t>{dead_consumer});
  // Every buffer posted to the dead peer came back: filled before the kill, or failed.
  EXPECT_EQ(s.path->rx.inflight(), 0u);
  for (status e : s.path->rx_errors) EXPECT_EQ(e, status::connection_reset);
  // What arrived before the kill is intact and in order.
  for (size_t i = 0; i < s.path->got.size(); ++i)
    EXPECT_EQ(s.path->got[i], "stream " + std::to_string(i));

  // The server goes on serving new clients.
  subprocess again({peer_path(), "client", "--name", s.name});
  ASSERT_TRUE(s.run([&] { return s.connects == 2 && s.conn != nullptr; })) << again.output();
}

TEST(comch_cross_process, server_killed_mid_stream_moves_the_client_out_of_running) {
  private_socket_dir ours;  // the killed server cannot remove its socket file; this goes with it
  std::string name = channel_name();
  subprocess peer({peer_path(), "server", "--name", name, "--stream"});
  ASSERT_TRUE(peer.wait_for_output("LISTENING", wait_limit)) << peer.output();

  core::progress_engine engine(core::poll_mode::event);
  std::vector<uint32_t> peer_consumers, expired;
  client cli(
      engine,
      {.name = name,
       .events = {
           .on_consumer_new = [&](connection&, uint32_t id) { peer_consumers.push_back(id); },
           .on_consumer_expired = [&](connection&, uint32_t id) { expired.push_back(id); }}});
  ASSERT_EQ(cli.start(), status::success);
  ASSERT_TRUE(engine.run_until([&] { return cli.state() == context_state::running; }, wait_limit));
  local_fast_path path(engine, *cli.get_connection());
  ASSERT_TRUE(engine.run_until([&] { return path.got.size() >= 200 && !peer_consumers.empty(); },
                               wait_limit))
      << peer.output();
  std::vector<context_state> states;
  cli.set_state_changed_callback(
      [&](core::context&, context_state, context_state next) { states.push_back(next); });

  ::kill(peer.pid(), SIGKILL);
  ASSERT_TRUE(engine.run_until([&] { return cli.state() == context_state::idle && path.idle(); },
                               wait_limit));
  EXPECT_EQ(states, (std::vector<context_state>{context_state::stopping, context_state::idle}));
  EXPECT_EQ(cli.last_error(), status::connection_reset);
  EXPECT_EQ(expired, peer_consumers);
  EXPECT_EQ(path.rx.inflight(), 0u);
  for (status e : path.rx_errors) EXPECT_EQ(e, status::connection_reset);
  for (size_t i = 0; i < path.got.size(); ++i)
    EXPECT_EQ(path.got[i], "stream " + std::to_string(i));
  // Nothing more can be sent on the dead channel.
  auto* t = path.tx.allocate_send(*path.tx_mem.buffers[0], peer_consumers.at(0));
  EXPECT_EQ(path.tx.submit(*t), status::bad_state);
  t->free();
  EXPECT_EQ(cli.submit(*cli.allocate_send(bytes_of("x"))), status::bad_state);
}

constexpr const char* nobody = "65534";
constexpr uid_t nobody_uid = 65534;

// Our socket directory keeps other users out (socket_dir_test.cpp). Should one get in anyway,
// both ends still refuse each other by their credentials (SO_PEERCRED): the two tests below open
// a way in by hand.

TEST(comch_cross_process, clients_of_another_user_are_refused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the peer as another user";
  private_socket_dir ours;
  local_server s;
  // The way in: a link to our socket, open to all, in a socket directory of theirs.
  scratch_path theirs;
  ASSERT_EQ(mkdir(theirs.path.c_str(), 0700), 0);
  ASSERT_EQ(chown(theirs.path.c_str(), nobody_uid, nobody_uid), 0);
  ASSERT_EQ(link(s.srv.socket_path().c_str(), socket_path(theirs.path, "auto", s.name).c_str()), 0);
  ASSERT_EQ(chmod(s.srv.socket_path().c_str(), 0777), 0);
  subprocess peer({peer_path(), "client", "--name", s.name, "--as-uid", nobody},
                  {{internal::socket_dir_variable, theirs.path}});
  ASSERT_TRUE(s.run([&] { return s.srv.refused_peers() == 1; })) << peer.output();
  auto exit_code = peer.wait(wait_limit);
  if (exit_code == 4) GTEST_SKIP() << "cannot change uid here: " << peer.output();
  EXPECT_EQ(exit_code, std::optional<int>(3)) << peer.output();
  // Both ends refuse: the client would not talk to a server of another user either.
  EXPECT_NE(peer.output().find("REFUSED DOCA_ERROR_NOT_PERMITTED"), std::string::npos)
      << peer.output();
  EXPECT_EQ(s.connects, 0);
  EXPECT_EQ(s.srv.connection_count(), 0u);
}

TEST(comch_cross_process, a_server_of_another_user_is_refused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the peer as another user";
  private_socket_dir ours;
  scratch_path theirs;  // the peer makes it, as its socket directory
  std::string name = channel_name();
  subprocess peer({peer_path(), "server", "--name", name, "--as-uid", nobody},
                  {{internal::socket_dir_variable, theirs.path}});
  if (!peer.wait_for_output("LISTENING", wait_limit)) {
    if (peer.wait(wait_limit) == 4) GTEST_SKIP() << "cannot change uid here: " << peer.output();
    FAIL() << peer.output();
  }
  // The way in: a link in our directory to their socket (root may follow it anywhere).
  ASSERT_EQ(symlink(socket_path(theirs.path, "auto", name).c_str(),
                    socket_path(internal::socket_directory(), "auto", name).c_str()),
            0);
  core::progress_engine engine(core::poll_mode::event);
  client cli(engine, {.name = name});
  try {
    cli.start();
    FAIL() << "connected to a server of another user";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::not_permitted) << e.what();
    EXPECT_NE(std::string(e.what()).find("another user"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cli.state(), context_state::idle);
}

}  // namespace
}  // namespace zc::comch::test
