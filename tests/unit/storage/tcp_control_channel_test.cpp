#include "storage/tcp_control_channel.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

#include "support/raw_client.hpp"
#include "support/subprocess.hpp"
#include "unit/storage/hex.hpp"

namespace zc::storage {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

// Generous bound for every wait: a slow CI machine fails late, never hangs.
constexpr auto wait_limit = 10s;

std::string local(uint16_t port) {
  return "127.0.0.1:" + std::to_string(port);
}

message query(uint32_t id) {
  return {message_type::query_storage_request, id, id, empty_payload{}};
}

// A server and a client connected to it.
struct connected_pair {
  connected_pair()
      : server(zc::test::free_tcp_port()), client(local(server.port()), clock::now() + wait_limit) {
    EXPECT_EQ(wait_until_connected(server, wait_limit), status::success);
  }
  tcp_server_channel server;
  tcp_client_channel client;
};

TEST(tcp_control_channel, messages_travel_both_ways) {
  connected_pair p;
  EXPECT_TRUE(p.client.is_connected());
  EXPECT_TRUE(p.server.is_connected());
  EXPECT_EQ(p.server.peer().rfind("127.0.0.1:", 0), 0u) << p.server.peer();
  EXPECT_EQ(p.client.peer(), local(p.server.port()));

  ASSERT_EQ(p.client.send(query(1)), status::success);
  receive_result got = wait_for(p.server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(*got.msg, query(1));

  const message reply = make_response(*got.msg, message_type::query_storage_response,
                                      query_storage_response_payload{524288, 4096});
  ASSERT_EQ(p.server.send(reply), status::success);
  got = wait_for(p.client, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(*got.msg, reply);
}

TEST(tcp_control_channel, several_queued_messages_arrive_one_per_poll_in_order) {
  connected_pair p;
  for (uint32_t i = 0; i < 5; ++i) ASSERT_EQ(p.client.send(query(i)), status::success);
  for (uint32_t i = 0; i < 5; ++i) {
    receive_result got = wait_for(p.server, wait_limit);
    ASSERT_TRUE(got.msg) << got.text;
    EXPECT_EQ(got.msg->message_id, i);
  }
}

TEST(tcp_control_channel, wait_for_times_out_when_nothing_comes) {
  connected_pair p;
  const receive_result r = wait_for(p.server, 20ms);
  EXPECT_FALSE(r.msg);
  EXPECT_EQ(r.code, status::time_out);
  EXPECT_TRUE(p.server.is_connected());
}

TEST(tcp_control_channel, peer_close_is_detected_by_the_server) {
  connected_pair p;
  p.client.close();
  EXPECT_FALSE(p.client.is_connected());
  const receive_result r = wait_for(p.server, wait_limit);
  EXPECT_FALSE(r.msg);
  EXPECT_EQ(r.code, status::connection_reset);
  EXPECT_NE(r.text.find("closed the connection"), std::string::npos) << r.text;
  EXPECT_FALSE(p.server.is_connected());
  EXPECT_EQ(p.server.send(query(1)), status::not_connected);
}

TEST(tcp_control_channel, peer_close_is_detected_by_the_client) {
  connected_pair p;
  p.server.close();
  const receive_result r = wait_for(p.client, wait_limit);
  EXPECT_EQ(r.code, status::connection_reset) << r.text;
  EXPECT_FALSE(p.client.is_connected());
  EXPECT_EQ(p.client.send(query(1)), status::not_connected);
}

TEST(tcp_control_channel, messages_sent_before_a_close_are_delivered_first) {
  connected_pair p;
  ASSERT_EQ(p.client.send(query(1)), status::success);
  ASSERT_EQ(p.client.send(query(2)), status::success);
  p.client.close();
  for (uint32_t i = 1; i <= 2; ++i) {
    receive_result got = wait_for(p.server, wait_limit);
    ASSERT_TRUE(got.msg) << got.text;
    EXPECT_EQ(got.msg->message_id, i);
  }
  EXPECT_EQ(wait_for(p.server, wait_limit).code, status::connection_reset);
}

TEST(tcp_control_channel, server_accepts_a_new_client_after_the_first_leaves) {
  tcp_server_channel server(zc::test::free_tcp_port());
  const int fd = server.wait_fd();
  {
    tcp_client_channel first(local(server.port()), clock::now() + wait_limit);
    ASSERT_EQ(wait_until_connected(server, wait_limit), status::success);
  }
  EXPECT_EQ(wait_for(server, wait_limit).code, status::connection_reset);
  tcp_client_channel second(local(server.port()), clock::now() + wait_limit);
  ASSERT_EQ(wait_until_connected(server, wait_limit), status::success);
  ASSERT_EQ(second.send(query(9)), status::success);
  const receive_result got = wait_for(server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, 9u);
  EXPECT_EQ(server.wait_fd(), fd);  // stable, so it can stay in an epoll set
}

TEST(tcp_control_channel, second_client_is_rejected_while_one_is_served) {
  connected_pair p;
  tcp_client_channel intruder(local(p.server.port()), clock::now() + wait_limit);

  // The server turns the intruder away on its next polls; the intruder sees its peer close.
  receive_result seen;
  const auto deadline = clock::now() + wait_limit;
  while (clock::now() < deadline) {
    const receive_result s = p.server.poll();
    ASSERT_FALSE(s.msg);
    ASSERT_FALSE(s.failed()) << s.text;
    seen = wait_for(intruder, 50ms);
    if (seen.code != status::time_out) break;
  }
  EXPECT_EQ(seen.code, status::connection_reset) << seen.text;
  EXPECT_FALSE(intruder.is_connected());

  // The first client is still served.
  ASSERT_EQ(p.client.send(query(3)), status::success);
  const receive_result got = wait_for(p.server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, 3u);
}

TEST(tcp_control_channel, malformed_frame_is_reported_and_closes_the_connection) {
  tcp_server_channel server(zc::test::free_tcp_port());
  zc::test::raw_client raw(server.port());
  ASSERT_TRUE(raw.connected());
  ASSERT_EQ(wait_until_connected(server, wait_limit), status::success);

  // A well-formed frame first, then one of unknown type 15.
  auto bytes = encode(query(1));
  const auto bad = test::hex("00 00 00 0C | 00 00 00 0F | 00 00 00 00 | 00 00 00 00");
  bytes.insert(bytes.end(), bad.begin(), bad.end());
  ASSERT_TRUE(raw.send(bytes));

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
  EXPECT_TRUE(raw.read(wait_limit).second);
}

TEST(tcp_control_channel, oversized_frame_header_closes_the_connection_at_once) {
  tcp_server_channel server(zc::test::free_tcp_port());
  zc::test::raw_client raw(server.port());
  ASSERT_TRUE(raw.connected());
  ASSERT_EQ(wait_until_connected(server, wait_limit), status::success);
  const auto header = test::hex("7F FF FF FF");
  ASSERT_TRUE(raw.send(header));
  const receive_result got = wait_for(server, wait_limit);
  EXPECT_EQ(got.code, status::too_big) << got.text;
  EXPECT_FALSE(server.is_connected());
  EXPECT_TRUE(raw.read(wait_limit).second);
}

TEST(tcp_control_channel, send_refuses_a_body_over_the_maximum) {
  tcp_server_channel server(zc::test::free_tcp_port());
  tcp_client_channel client(local(server.port()), clock::now() + wait_limit, 64);
  const message big{message_type::init_storage_request, 0, 0,
                    init_storage_request_payload{1, 1, std::vector<uint8_t>(100, 1)}};
  EXPECT_EQ(client.send(big), status::too_big);
  EXPECT_NE(client.last_error().find("exceeds"), std::string::npos) << client.last_error();
  EXPECT_TRUE(client.is_connected());
  EXPECT_EQ(client.pending_send_bytes(), 0u);
}

TEST(tcp_control_channel, a_full_socket_queues_sends_and_flushes_them_later) {
  connected_pair p;
  // Blobs near the frame maximum; the server does not read until the socket pushes back.
  const std::vector<uint8_t> blob(60 * 1024, 0x5C);
  uint32_t sent = 0;
  status last = status::success;
  while (sent < 10'000) {
    message m{message_type::init_storage_request, sent, 0,
              init_storage_request_payload{sent, 1, blob}};
    last = p.client.send(m);
    if (last != status::success) break;
    ++sent;
  }
  // The kernel buffers filled, the channel queued (EAGAIN is not an error) and finally said full.
  EXPECT_EQ(last, status::full) << p.client.last_error();
  EXPECT_GT(p.client.pending_send_bytes(), 0u);
  EXPECT_TRUE(p.client.is_connected());

  for (uint32_t i = 0; i < sent; ++i) {
    (void)p.client.poll();  // flushes the queue as the server makes room
    const receive_result got = wait_for(p.server, wait_limit);
    ASSERT_TRUE(got.msg) << "message " << i << ": " << got.text;
    ASSERT_EQ(got.msg->message_id, i);
    ASSERT_EQ(std::get<init_storage_request_payload>(got.msg->payload).mmap_export, blob);
  }
  EXPECT_EQ(p.client.pending_send_bytes(), 0u);
}

TEST(tcp_control_channel, bad_addresses_are_rejected) {
  for (const char* address : {"127.0.0.1", "300.0.0.1:80", "127.0.0.1:0", "127.0.0.1:99999",
                              "localhost:80", "1.2.3:80", "127.0.0.1:12ab"}) {
    try {
      tcp_client_channel client(address, clock::now() + 1s);
      ADD_FAILURE() << "accepted " << address;
    } catch (const status_error& e) {
      EXPECT_EQ(e.code(), status::invalid_value) << address;
    }
  }
}

TEST(tcp_control_channel, connect_retries_until_the_deadline_then_times_out) {
  const uint16_t port = zc::test::free_tcp_port();  // nobody listens there
  try {
    tcp_client_channel client(local(port), clock::now() + 300ms);
    ADD_FAILURE() << "connected to a port nobody listens on";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::time_out) << e.what();
    EXPECT_NE(std::string(e.what()).find(local(port)), std::string::npos) << e.what();
  }
}

TEST(tcp_control_channel, connect_retries_until_the_server_comes_up) {
  const uint16_t port = zc::test::free_tcp_port();
  auto client = std::async(std::launch::async, [port] {
    return std::make_unique<tcp_client_channel>(local(port), clock::now() + wait_limit);
  });
  // Give the client time to be refused at least once; correctness does not depend on it.
  std::this_thread::sleep_for(2 * connect_retry_interval);
  tcp_server_channel server(port);
  ASSERT_EQ(wait_until_connected(server, wait_limit), status::success);
  ASSERT_EQ(client.wait_for(wait_limit), std::future_status::ready);
  auto channel = client.get();
  ASSERT_EQ(channel->send(query(5)), status::success);
  const receive_result got = wait_for(server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, 5u);
}

TEST(tcp_control_channel, server_reports_a_port_in_use) {
  tcp_server_channel first(0);
  try {
    tcp_server_channel second(first.port());
    ADD_FAILURE() << "bound a port twice";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::in_use) << e.what();
  }
}

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

TEST(tcp_control_channel, no_descriptor_is_leaked) {
  const size_t before = open_descriptors();
  {
    connected_pair p;
    // A rejected intruder, a lost client, a replacement and a refused connect, then teardown.
    tcp_client_channel intruder(local(p.server.port()), clock::now() + wait_limit);
    for (int i = 0; i < 100 && wait_for(intruder, 20ms).code == status::time_out; ++i)
      (void)p.server.poll();
    p.client.close();
    EXPECT_EQ(wait_for(p.server, wait_limit).code, status::connection_reset);
    tcp_client_channel replacement(local(p.server.port()), clock::now() + wait_limit);
    EXPECT_EQ(wait_until_connected(p.server, wait_limit), status::success);
    try {
      tcp_client_channel refused(local(zc::test::free_tcp_port()), clock::now() + 150ms);
    } catch (const status_error&) {
    }
  }
  EXPECT_EQ(open_descriptors(), before);
}

TEST(tcp_control_channel, unconnected_server_reports_not_connected) {
  tcp_server_channel server(0);
  EXPECT_FALSE(server.is_connected());
  EXPECT_EQ(server.send(query(1)), status::not_connected);
  const receive_result r = server.poll();
  EXPECT_FALSE(r.msg);
  EXPECT_FALSE(r.failed());
  EXPECT_EQ(wait_until_connected(server, 10ms), status::time_out);
}

int int_option(int fd, int level, int name) {
  int value = -1;
  socklen_t len = sizeof(value);
  EXPECT_EQ(::getsockopt(fd, level, name, &value, &len), 0) << std::strerror(errno);
  return value;
}

// A host that vanishes without a FIN must not pin a session: both ends of a control connection
// probe an idle peer and give up on it within dead_peer_limit.
TEST(tcp_control_channel, both_ends_find_a_vanished_peer_within_a_bound_of_the_control_timeout) {
  static_assert(keepalive_idle + keepalive_probes * keepalive_interval == dead_peer_limit);
  static_assert(dead_peer_limit <= 2 * default_control_timeout);
  connected_pair p;
  for (const auto* end : {static_cast<const tcp_control_channel*>(&p.server),
                          static_cast<const tcp_control_channel*>(&p.client)}) {
    SCOPED_TRACE(end == &p.server ? "accepted socket" : "connecting socket");
    const int fd = end->native_handle();
    ASSERT_GE(fd, 0);
    EXPECT_EQ(int_option(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_KEEPIDLE), keepalive_idle.count());
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_KEEPINTVL), keepalive_interval.count());
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_KEEPCNT), keepalive_probes);
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT),
              std::chrono::milliseconds(dead_peer_limit).count());
  }
}

}  // namespace
}  // namespace zc::storage
