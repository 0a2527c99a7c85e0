// The comch control channel: what tcp_control_channel_test checks for TCP (connect, round trips,
// malformed frames, peer loss, one client at a time, bounded sends, sleeping waits, Ctrl-C), plus
// what comch adds: one frame per comch message, consumer events, a late or missing server, and a
// peer process that dies.
#include "storage/comch_control_channel.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <thread>

#include "comch/consumer.hpp"
#include "core/memory_map.hpp"
#include "core/thread.hpp"
#include "support/subprocess.hpp"
#include "unit/storage/hex.hpp"

namespace zc::storage {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;
using core::context_state;

// Generous bound for every wait: a slow CI machine fails late, never hangs.
constexpr auto wait_limit = 10s;

std::string channel_name() {
  return zc::test::unique_name("storage-ctl");
}

message query(uint32_t id) {
  return {message_type::query_storage_request, id, id, empty_payload{}};
}

// comch's handshake needs both ends progressed: the client is built on another thread while this
// one polls the server, then handed over (a channel belongs to one thread at a time).
std::unique_ptr<comch_control_client> connect_client(comch_control_server& server,
                                                     const std::string& name,
                                                     comch_channel_options options = {}) {
  auto pending = std::async(std::launch::async, [&name, options] {
    return std::make_unique<comch_control_client>("auto", name, clock::now() + wait_limit, options);
  });
  EXPECT_EQ(wait_until_connected(server, wait_limit), status::success);
  EXPECT_EQ(pending.wait_for(wait_limit), std::future_status::ready);
  return pending.get();
}

struct connected_pair {
  explicit connected_pair(comch_channel_options client_options = {})
      : server("", name), client(connect_client(server, name, client_options)) {}
  std::string name = channel_name();
  comch_control_server server;
  std::unique_ptr<comch_control_client> client;
};

// A bare comch client, to send comch messages the channel would never send.
struct raw_client {
  explicit raw_client(const std::string& name)
      : cli(engine, comch::client_config{.name = name, .max_msg_size = 64 * 1024}) {}
  ~raw_client() {
    if (cli.state() != context_state::idle) (void)cli.stop();
    engine.run_until([&] { return cli.state() == context_state::idle; }, wait_limit);
  }
  // Progresses both ends until the server has reported this client.
  bool connect(comch_control_server& server) {
    if (cli.start() != status::success) return false;
    return run_with(server,
                    [&] { return cli.state() == context_state::running && server.is_connected(); });
  }
  template <typename Done>
  bool run_with(comch_control_server& server, Done&& done) {
    const auto deadline = clock::now() + wait_limit;
    while (!done()) {
      if (clock::now() >= deadline) return false;
      engine.progress();
      const receive_result r = server.poll();
      EXPECT_FALSE(r.msg);
      EXPECT_FALSE(r.failed()) << r.text;
      pollfd fds[2] = {{cli.wait_fd(), POLLIN, 0}, {server.wait_fd(), POLLIN, 0}};
      (void)::poll(fds, 2, 10);
    }
    return true;
  }
  // Sends `bytes` as one comch message; they must outlive the send.
  status send(const std::vector<uint8_t>& bytes) {
    comch::send_task* t = cli.allocate_send(bytes);
    if (t == nullptr) return status::full;
    return cli.submit(*t);
  }
  // True once the server has closed this connection.
  bool sees_close() {
    return engine.run_until([&] { return cli.state() == context_state::idle; }, wait_limit);
  }

  core::progress_engine engine{core::poll_mode::event};
  comch::client cli;
};

TEST(comch_control_channel, messages_travel_both_ways) {
  connected_pair p;
  EXPECT_TRUE(p.client->is_connected());
  EXPECT_TRUE(p.server.is_connected());
  ASSERT_NE(p.server.connection(), nullptr);
  ASSERT_NE(p.client->connection(), nullptr);
  EXPECT_EQ(p.server.connection()->peer_pid(), ::getpid());

  ASSERT_EQ(p.client->send(query(1)), status::success);
  receive_result got = wait_for(p.server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(*got.msg, query(1));

  const message reply = make_response(*got.msg, message_type::query_storage_response,
                                      query_storage_response_payload{524288, 4096});
  ASSERT_EQ(p.server.send(reply), status::success);
  got = wait_for(*p.client, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(*got.msg, reply);
}

TEST(comch_control_channel, several_queued_messages_arrive_one_per_poll_in_order) {
  connected_pair p;
  for (uint32_t i = 0; i < 20; ++i) ASSERT_EQ(p.client->send(query(i)), status::success);
  for (uint32_t i = 0; i < 20; ++i) {
    receive_result got = wait_for(p.server, wait_limit);
    ASSERT_TRUE(got.msg) << got.text;
    EXPECT_EQ(got.msg->message_id, i);
  }
}

TEST(comch_control_channel, wait_for_times_out_when_nothing_comes) {
  connected_pair p;
  const receive_result r = wait_for(p.server, 20ms);
  EXPECT_FALSE(r.msg);
  EXPECT_EQ(r.code, status::time_out);
  EXPECT_TRUE(p.server.is_connected());
}

TEST(comch_control_channel, peer_close_is_detected_by_the_server) {
  connected_pair p;
  p.client->close();
  EXPECT_FALSE(p.client->is_connected());
  EXPECT_EQ(p.client->connection(), nullptr);
  const receive_result r = wait_for(p.server, wait_limit);
  EXPECT_FALSE(r.msg);
  EXPECT_EQ(r.code, status::connection_reset);
  EXPECT_NE(r.text.find("closed the connection"), std::string::npos) << r.text;
  EXPECT_FALSE(p.server.is_connected());
  EXPECT_EQ(p.server.connection(), nullptr);
  EXPECT_EQ(p.server.send(query(1)), status::not_connected);
}

TEST(comch_control_channel, peer_close_is_detected_by_the_client) {
  connected_pair p;
  p.server.close();
  EXPECT_FALSE(p.server.is_connected());
  const receive_result r = wait_for(*p.client, wait_limit);
  EXPECT_EQ(r.code, status::connection_reset) << r.text;
  EXPECT_FALSE(p.client->is_connected());
  EXPECT_EQ(p.client->send(query(1)), status::not_connected);
}

TEST(comch_control_channel, messages_sent_before_a_close_are_delivered_first) {
  connected_pair p;
  ASSERT_EQ(p.client->send(query(1)), status::success);
  ASSERT_EQ(p.client->send(query(2)), status::success);
  p.client->close();
  for (uint32_t i = 1; i <= 2; ++i) {
    receive_result got = wait_for(p.server, wait_limit);
    ASSERT_TRUE(got.msg) << got.text;
    EXPECT_EQ(got.msg->message_id, i);
  }
  EXPECT_EQ(wait_for(p.server, wait_limit).code, status::connection_reset);
}

TEST(comch_control_channel, server_accepts_a_new_client_after_the_first_leaves) {
  const std::string name = channel_name();
  comch_control_server server("", name);
  const int fd = server.wait_fd();
  {
    auto first = connect_client(server, name);
    ASSERT_TRUE(first);
  }
  EXPECT_EQ(wait_for(server, wait_limit).code, status::connection_reset);
  auto second = connect_client(server, name);
  ASSERT_TRUE(second);
  ASSERT_EQ(second->send(query(9)), status::success);
  const receive_result got = wait_for(server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, 9u);
  EXPECT_EQ(server.wait_fd(), fd);  // stable, so it can stay in an epoll set
}

TEST(comch_control_channel, second_client_is_refused_and_the_first_keeps_working) {
  connected_pair p;
  // The intruder either fails to connect or loses its connection at once: connection_reset.
  auto intruder = std::async(std::launch::async, [&] {
    try {
      comch_control_client c("auto", p.name, clock::now() + wait_limit);
      return wait_for(c, wait_limit).code;
    } catch (const status_error& e) {
      return e.code();
    }
  });
  const auto deadline = clock::now() + wait_limit;
  while (intruder.wait_for(0s) != std::future_status::ready && clock::now() < deadline) {
    const receive_result s = wait_for(p.server, 20ms);
    ASSERT_FALSE(s.msg);
    ASSERT_EQ(s.code, status::time_out) << s.text;
  }
  ASSERT_EQ(intruder.wait_for(0s), std::future_status::ready);
  EXPECT_EQ(intruder.get(), status::connection_reset);
  EXPECT_EQ(p.server.refused_clients(), 1u);

  // The first client is still served, both ways.
  ASSERT_EQ(p.client->send(query(3)), status::success);
  receive_result got = wait_for(p.server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, 3u);
  ASSERT_EQ(p.server.send(make_response(*got.msg, message_type::start_storage_response)),
            status::success);
  got = wait_for(*p.client, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->type, message_type::start_storage_response);
}

TEST(comch_control_channel, malformed_frame_is_reported_and_closes_the_connection) {
  const std::string name = channel_name();
  comch_control_server server("", name);
  {
    raw_client raw(name);
    ASSERT_TRUE(raw.connect(server));
    // A well-formed frame first, then one of unknown type 15, each its own comch message.
    const auto good = encode(query(1));
    const auto bad = test::hex("00 00 00 0C | 00 00 00 0F | 00 00 00 00 | 00 00 00 00");
    ASSERT_EQ(raw.send(good), status::success);
    ASSERT_EQ(raw.send(bad), status::success);

    receive_result got = wait_for(server, wait_limit);
    ASSERT_TRUE(got.msg) << got.text;
    EXPECT_EQ(*got.msg, query(1));
    got = wait_for(server, wait_limit);
    EXPECT_FALSE(got.msg);
    EXPECT_EQ(got.code, status::not_supported);
    EXPECT_NE(got.text.find("malformed control message"), std::string::npos) << got.text;
    EXPECT_NE(got.text.find("unknown control message type 15"), std::string::npos) << got.text;
    EXPECT_EQ(server.last_error(), got.text);
    EXPECT_FALSE(server.is_connected());
    EXPECT_TRUE(raw.sees_close());
  }
  // The server is unharmed: the next client is served.
  auto next = connect_client(server, name);
  ASSERT_TRUE(next);
  ASSERT_EQ(next->send(query(2)), status::success);
  const receive_result got = wait_for(server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
}

// One comch message is exactly one frame (FORMATS.md §6): no more, no less, no huge header.
TEST(comch_control_channel, a_comch_message_must_hold_exactly_one_frame) {
  const std::string name = channel_name();
  comch_control_server server("", name);
  auto two = encode(query(1));
  const auto second = encode(query(2));
  two.insert(two.end(), second.begin(), second.end());
  auto trailing = encode(query(1));
  trailing.push_back(0);
  auto truncated = encode(query(1));
  truncated.pop_back();
  const struct {
    const char* what;
    std::vector<uint8_t> bytes;
    status code;
    const char* text;
  } cases[] = {
      {"two frames", two, status::invalid_value, "bytes after the frame"},
      {"a trailing byte", trailing, status::invalid_value, "1 bytes after the frame"},
      {"a truncated frame", truncated, status::invalid_value, "truncated frame"},
      {"a header alone", test::hex("00 00 00 0C"), status::invalid_value, "truncated frame"},
      {"an oversized length", test::hex("7F FF FF FF"), status::too_big, "malformed"},
      {"a length over the comch maximum", test::hex("00 00 10 00 | 00 00 00 01"), status::too_big,
       "malformed"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    raw_client raw(name);
    ASSERT_TRUE(raw.connect(server));
    ASSERT_EQ(raw.send(c.bytes), status::success);
    const receive_result got = wait_for(server, wait_limit);
    EXPECT_FALSE(got.msg);
    EXPECT_EQ(got.code, c.code) << got.text;
    EXPECT_NE(got.text.find(c.text), std::string::npos) << got.text;
    EXPECT_FALSE(server.is_connected());
    EXPECT_TRUE(raw.sees_close());
  }
}

TEST(comch_control_channel, send_refuses_a_body_over_the_maximum) {
  connected_pair p(comch_channel_options{.max_body_size = 64});
  EXPECT_EQ(p.client->max_body_size(), 64u);
  const message big{message_type::init_storage_request, 0, 0,
                    init_storage_request_payload{1, 1, std::vector<uint8_t>(100, 1)}};
  EXPECT_EQ(p.client->send(big), status::too_big);
  EXPECT_NE(p.client->last_error().find("exceeds the channel maximum"), std::string::npos)
      << p.client->last_error();
  EXPECT_TRUE(p.client->is_connected());
  EXPECT_EQ(p.client->queued_sends(), 0u);
  // The server's maximum follows its comch message size: 4080 - 4.
  EXPECT_EQ(p.server.max_body_size(), comch::default_max_msg_size - frame_header_size);
}

TEST(comch_control_channel, send_refuses_a_frame_over_the_connections_message_size) {
  // The client could take 16 KiB messages; the server only 4080 bytes, so the connection does.
  connected_pair p(comch_channel_options{.max_msg_size = 16 * 1024});
  ASSERT_NE(p.client->connection(), nullptr);
  EXPECT_EQ(p.client->connection()->max_send_size(), comch::default_max_msg_size);
  const message big{message_type::init_storage_request, 0, 0,
                    init_storage_request_payload{1, 1, std::vector<uint8_t>(5000, 1)}};
  EXPECT_EQ(p.client->send(big), status::too_big);
  EXPECT_NE(p.client->last_error().find("comch message maximum"), std::string::npos)
      << p.client->last_error();
  ASSERT_EQ(p.client->send(query(4)), status::success);
  const receive_result got = wait_for(p.server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
}

TEST(comch_control_channel, the_ring_of_sends_fills_then_drains_in_order) {
  connected_pair p(comch_channel_options{.max_queued_sends = 16});
  // Frames near the comch maximum; the server does not read until the socket pushes back, then
  // comch's send tasks stay in flight and the ring fills.
  const std::vector<uint8_t> blob(4000, 0x5C);
  auto frame = [&](uint32_t i) {
    return message{message_type::init_storage_request, i, 0,
                   init_storage_request_payload{i, 1, blob}};
  };
  uint32_t sent = 0;
  status last = status::success;
  while (sent < 10'000) {
    last = p.client->send(frame(sent));
    if (last != status::success) break;
    ++sent;
  }
  EXPECT_EQ(last, status::full) << p.client->last_error();
  EXPECT_GT(sent, 16u);  // the socket took some
  EXPECT_EQ(p.client->queued_sends(), 16u);
  EXPECT_TRUE(p.client->is_connected());

  for (uint32_t i = 0; i < sent; ++i) {
    (void)p.client->poll();  // completes send tasks and submits the waiting sends
    const receive_result got = wait_for(p.server, wait_limit);
    ASSERT_TRUE(got.msg) << "message " << i << ": " << got.text;
    ASSERT_EQ(got.msg->message_id, i);
    ASSERT_EQ(std::get<init_storage_request_payload>(got.msg->payload).mmap_export, blob);
  }
  const auto deadline = clock::now() + wait_limit;
  while (p.client->queued_sends() != 0 && clock::now() < deadline) (void)wait_for(*p.client, 10ms);
  EXPECT_EQ(p.client->queued_sends(), 0u);
  // Room again.
  ASSERT_EQ(p.client->send(query(99)), status::success);
  const receive_result got = wait_for(p.server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, 99u);
}

TEST(comch_control_channel, client_gives_up_within_its_connect_timeout_without_a_server) {
  const std::string name = channel_name();
  const auto start = clock::now();
  try {
    comch_control_client client("auto", name, start + 300ms);
    ADD_FAILURE() << "connected to a channel nobody serves";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::time_out) << e.what();
    EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
  }
  const auto took = clock::now() - start;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 2s);
}

TEST(comch_control_channel, client_retries_until_a_late_server_appears) {
  const std::string name = channel_name();
  auto client = std::async(std::launch::async, [&name] {
    return std::make_unique<comch_control_client>("auto", name, clock::now() + wait_limit);
  });
  std::this_thread::sleep_for(200ms);  // the client dials in vain meanwhile
  comch_control_server server("", name);
  ASSERT_EQ(wait_until_connected(server, wait_limit), status::success);
  ASSERT_EQ(client.wait_for(wait_limit), std::future_status::ready);
  auto channel = client.get();
  ASSERT_EQ(channel->send(query(5)), status::success);
  const receive_result got = wait_for(server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, 5u);
}

TEST(comch_control_channel, server_reports_a_name_in_use) {
  const std::string name = channel_name();
  comch_control_server first("", name);
  try {
    comch_control_server second("", name);
    ADD_FAILURE() << "served a name twice";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::in_use) << e.what();
  }
}

TEST(comch_control_channel, unconnected_server_reports_not_connected) {
  comch_control_server server("", channel_name());
  EXPECT_FALSE(server.is_connected());
  EXPECT_EQ(server.connection(), nullptr);
  EXPECT_EQ(server.send(query(1)), status::not_connected);
  const receive_result r = server.poll();
  EXPECT_FALSE(r.msg);
  EXPECT_FALSE(r.failed());
  EXPECT_EQ(wait_until_connected(server, 10ms), status::time_out);
}

double thread_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

TEST(comch_control_channel, waits_sleep_on_wait_fd_without_spinning) {
  connected_pair p;
  // Nothing to do: after a poll() the descriptor is quiet.
  EXPECT_FALSE(p.server.poll().msg);
  pollfd fd{p.server.wait_fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&fd, 1, 100), 0);
  const double before = thread_cpu_seconds();
  EXPECT_EQ(wait_for(p.server, 300ms).code, status::time_out);
  EXPECT_EQ(wait_for(*p.client, 300ms).code, status::time_out);
  EXPECT_LT(thread_cpu_seconds() - before, 0.1);  // 600 ms of waiting, next to no CPU
  // A message makes it readable.
  ASSERT_EQ(p.client->send(query(1)), status::success);
  EXPECT_EQ(::poll(&fd, 1, 5000), 1);
  EXPECT_TRUE(wait_for(p.server, wait_limit).msg);
}

TEST(comch_control_channel, a_stop_request_ends_every_wait) {
  const std::string name = channel_name();
  EXPECT_EXIT(
      {
        comch_control_server server("", name);
        core::request_stop();
        const auto start = clock::now();
        const bool connected_stopped = wait_until_connected(server, 30s) == status::shutdown;
        const bool wait_stopped = wait_for(server, 30s).code == status::shutdown;
        bool connect_stopped = false;
        try {
          comch_control_client client("auto", channel_name(), clock::now() + 30s);
        } catch (const status_error& e) {
          connect_stopped = e.code() == status::shutdown;
        }
        const bool quick = clock::now() - start < 5s;
        std::_Exit(connected_stopped && wait_stopped && connect_stopped && quick ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(comch_control_channel, a_wait_told_to_carry_on_outlives_a_stop_request_without_spinning) {
  EXPECT_EXIT(
      {
        connected_pair p;
        const bool sent = p.client->send(query(7)) == status::success;
        core::request_stop();
        auto got = wait_for(p.server, 5s, on_stop_request::carry_on);
        const bool received = got.msg && got.msg->message_id == 7;
        const double before = thread_cpu_seconds();
        const bool timed_out =
            wait_for(p.server, 300ms, on_stop_request::carry_on).code == status::time_out;
        const bool idle = thread_cpu_seconds() - before < 0.1;
        const bool gave_up = wait_for(p.server, 5s).code == status::shutdown;
        std::_Exit(sent && received && timed_out && idle && gave_up ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(comch_control_channel, consumer_events_of_the_client_surface_on_the_server) {
  connected_pair p;
  EXPECT_FALSE(p.server.take_consumer_event());
  auto memory = core::memory_map::allocate(4096, core::access::pci_read_write);
  comch::consumer rx(p.client->engine(), *p.client->connection(),
                     comch::consumer_config{.buffers = memory.get(), .post_recv_tasks = 4});
  ASSERT_EQ(rx.start(), status::success);

  // The client's polls carry the announcement out, the server's bring it in.
  std::optional<consumer_event> e;
  const auto deadline = clock::now() + wait_limit;
  auto next_event = [&] {
    while (!(e = p.server.take_consumer_event()) && clock::now() < deadline) {
      ASSERT_EQ(wait_for(*p.client, 10ms).code, status::time_out);
      ASSERT_EQ(wait_for(p.server, 10ms).code, status::time_out);
    }
  };
  next_event();
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, (consumer_event{consumer_event::kind::created, rx.id()}));

  ASSERT_EQ(rx.stop(), status::success);
  while (rx.state() != context_state::idle && clock::now() < deadline)
    (void)wait_for(*p.client, 10ms);
  ASSERT_EQ(rx.state(), context_state::idle);
  next_event();
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, (consumer_event{consumer_event::kind::expired, rx.id()}));
  EXPECT_FALSE(p.server.take_consumer_event());
  EXPECT_EQ(p.server.dropped_consumer_events(), 0u);
}

// The service's consumers reach the initiator the same way; the events come before the message
// the service sends after creating them.
TEST(comch_control_channel, consumer_events_of_the_server_surface_on_the_client) {
  connected_pair p;
  auto memory = core::memory_map::allocate(4096, core::access::pci_read_write);
  comch::consumer rx(p.server.engine(), *p.server.connection(),
                     comch::consumer_config{.buffers = memory.get(), .post_recv_tasks = 4});
  ASSERT_EQ(rx.start(), status::success);
  ASSERT_EQ(p.server.send(query(1)), status::success);
  const receive_result got = wait_for(*p.client, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  const std::optional<consumer_event> e = p.client->take_consumer_event();
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, (consumer_event{consumer_event::kind::created, rx.id()}));
  EXPECT_FALSE(p.client->take_consumer_event());
  ASSERT_EQ(rx.stop(), status::success);
  const auto deadline = clock::now() + wait_limit;
  while (rx.state() != context_state::idle && clock::now() < deadline)
    (void)wait_for(p.server, 10ms);
  EXPECT_EQ(rx.state(), context_state::idle);
}

TEST(comch_control_channel, a_killed_peer_process_is_connection_reset_within_a_bound) {
  const std::string name = channel_name();
  comch_control_server server("", name);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The peer: connects, says hello, then waits to be killed.
    try {
      comch_control_client client("auto", name, clock::now() + wait_limit);
      if (client.send(query(7)) == status::success)
        for (;;) (void)wait_for(client, 1s);
    } catch (...) {
    }
    std::_Exit(1);
  }
  ASSERT_EQ(wait_until_connected(server, wait_limit), status::success);
  receive_result got = wait_for(server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, 7u);
  EXPECT_EQ(server.connection()->peer_pid(), child);

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
  const auto start = clock::now();
  got = wait_for(server, wait_limit);
  EXPECT_EQ(got.code, status::connection_reset) << got.text;
  EXPECT_LT(clock::now() - start, 2s);
  EXPECT_FALSE(server.is_connected());
}

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

TEST(comch_control_channel, no_descriptor_is_leaked) {
  const size_t before = open_descriptors();
  {
    connected_pair p;
    // A refused intruder, a lost client, a replacement and a failed connect, then teardown.
    auto intruder = std::async(std::launch::async, [&] {
      try {
        comch_control_client c("auto", p.name, clock::now() + wait_limit);
        return wait_for(c, wait_limit).code;  // refused after its handshake
      } catch (const status_error& e) {
        return e.code();  // or during it
      }
    });
    const auto deadline = clock::now() + wait_limit;
    while (intruder.wait_for(0s) != std::future_status::ready && clock::now() < deadline)
      (void)wait_for(p.server, 20ms);
    ASSERT_EQ(intruder.wait_for(0s), std::future_status::ready) << "the intruder was never refused";
    EXPECT_EQ(intruder.get(), status::connection_reset);
    p.client->close();
    EXPECT_EQ(wait_for(p.server, wait_limit).code, status::connection_reset);
    auto replacement = connect_client(p.server, p.name);
    EXPECT_TRUE(p.server.is_connected());
    EXPECT_THROW(comch_control_client("auto", channel_name(), clock::now() + 50ms), status_error);
  }
  EXPECT_EQ(open_descriptors(), before);
}

}  // namespace
}  // namespace zc::storage
