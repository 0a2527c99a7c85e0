// The TCP control channel with --tls-psk: a client holding the key gets the same framed stream as
// without TLS; a peer without it (wrong key, plain TCP, silence) never gets a frame through.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <memory>

#include "storage/tcp_control_channel.hpp"
#include "storage/tls_psk.hpp"
#include "support/raw_client.hpp"
#include "support/subprocess.hpp"

namespace zc::storage {
namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

// Generous bound for every wait: a slow CI machine fails late, never hangs. Longer than the
// handshake timeout, which one test waits out.
constexpr auto wait_limit = tls_handshake_timeout + 10s;

std::shared_ptr<const psk_file> keys(std::string_view text) {
  return std::make_shared<const psk_file>(parse_psk_file(text, "test.psk"));
}

const auto good_keys = [] {
  return keys("zcstore:000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
};
// The same identity with another key.
const auto wrong_keys = [] {
  return keys("zcstore:ff0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
};

std::string local(uint16_t port) {
  return "127.0.0.1:" + std::to_string(port);
}

message query(uint32_t id) {
  return {message_type::query_storage_request, id, id, empty_payload{}};
}

// A TLS client connecting on another thread: its constructor completes the handshake, which needs
// the server to be polled meanwhile.
std::future<std::unique_ptr<tcp_client_channel>> connect_async(uint16_t port,
                                                               std::shared_ptr<const psk_file> k) {
  return std::async(std::launch::async, [port, k] {
    return std::make_unique<tcp_client_channel>(local(port), clock::now() + wait_limit, k);
  });
}

// Polls the server (sleeping on its wait_fd, never spinning) until the client is connected or the
// server has given up on a connection (last_error() changed from `previous_error`). True when
// connected.
bool serve_handshake(tcp_server_channel& server, const std::string& previous_error = "") {
  const auto deadline = clock::now() + wait_limit;
  while (clock::now() < deadline && server.last_error() == previous_error) {
    if (wait_until_connected(server, 100ms) == status::success) return true;
  }
  return false;
}

// The text of the status_error a client future ends with ("" when it connected).
std::string client_error(std::future<std::unique_ptr<tcp_client_channel>>& client,
                         status* code = nullptr) {
  EXPECT_EQ(client.wait_for(wait_limit), std::future_status::ready);
  try {
    (void)client.get();
  } catch (const status_error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

struct tls_pair {
  tls_pair() : server(0, tcp_server_options{0, good_keys()}) {
    auto pending = connect_async(server.port(), good_keys());
    EXPECT_TRUE(serve_handshake(server)) << server.last_error();
    EXPECT_EQ(pending.wait_for(wait_limit), std::future_status::ready);
    client = pending.get();
  }
  tcp_server_channel server;
  std::unique_ptr<tcp_client_channel> client;
};

TEST(tcp_tls_channel, messages_travel_both_ways_byte_for_byte) {
  tls_pair p;
  ASSERT_TRUE(p.client);
  EXPECT_TRUE(p.server.is_connected());
  EXPECT_TRUE(p.server.uses_tls());

  ASSERT_EQ(p.client->send(query(1)), status::success);
  receive_result got = wait_for(p.server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(*got.msg, query(1));

  // Blobs larger than one TLS record (16 KiB) each way.
  std::vector<uint8_t> blob(60 * 1024);
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<uint8_t>(i * 7 + 3);
  const message init{message_type::init_storage_request, 2, 2,
                     init_storage_request_payload{4, 4096, blob}};
  ASSERT_EQ(p.client->send(init), status::success);
  got = wait_for(p.server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(*got.msg, init);

  std::reverse(blob.begin(), blob.end());
  const message answer{message_type::init_storage_request, 3, 3,
                       init_storage_request_payload{8, 512, blob}};
  ASSERT_EQ(p.server.send(answer), status::success);
  got = wait_for(*p.client, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(*got.msg, answer);
}

TEST(tcp_tls_channel, a_full_socket_queues_sends_and_flushes_them_later) {
  tls_pair p;
  const std::vector<uint8_t> blob(60 * 1024, 0x5C);
  uint32_t sent = 0;
  status last = status::success;
  while (sent < 10'000) {
    message m{message_type::init_storage_request, sent, 0,
              init_storage_request_payload{sent, 1, blob}};
    last = p.client->send(m);
    if (last != status::success) break;
    ++sent;
  }
  EXPECT_EQ(last, status::full) << p.client->last_error();
  EXPECT_GT(p.client->pending_send_bytes(), 0u);
  for (uint32_t i = 0; i < sent; ++i) {
    (void)p.client->poll();  // flushes the queue as the server makes room
    const receive_result got = wait_for(p.server, wait_limit);
    ASSERT_TRUE(got.msg) << "message " << i << ": " << got.text;
    ASSERT_EQ(got.msg->message_id, i);
    ASSERT_EQ(std::get<init_storage_request_payload>(got.msg->payload).mmap_export, blob);
  }
  EXPECT_EQ(p.client->pending_send_bytes(), 0u);
}

// Frames that GnuTLS has decrypted but the channel has not taken yet leave the socket unreadable;
// poll() must still hand them over (control_channel: poll until nothing comes back).
TEST(tcp_tls_channel, frames_buffered_inside_tls_are_delivered) {
  // A small maximum: the channel takes at most one frame's worth (68 bytes) per poll, so the rest
  // of the 10 frames sent in one record stay inside GnuTLS.
  tcp_server_channel server(0, tcp_server_options{0, good_keys()}, 64);
  zc::test::raw_client raw(server.port());
  ASSERT_TRUE(raw.connected());
  ASSERT_EQ(::fcntl(raw.fd(), F_SETFL, O_NONBLOCK), 0);
  tls_session client(tls_session::role::client, good_keys(), raw.fd());
  const auto deadline = clock::now() + wait_limit;
  while (client.handshake() == tls_session::step::again && clock::now() < deadline) {
    (void)server.poll();
    pollfd fds[2] = {{raw.fd(), static_cast<short>(client.wants_write() ? POLLOUT : POLLIN), 0},
                     {server.wait_fd(), POLLIN, 0}};
    (void)::poll(fds, 2, 100);
  }
  ASSERT_TRUE(client.handshake_done()) << client.error();
  ASSERT_TRUE(serve_handshake(server)) << server.last_error();

  std::vector<uint8_t> record;
  for (uint32_t i = 0; i < 10; ++i) encode_to(query(i), record);
  const auto r = client.send(record.data(), record.size());
  ASSERT_EQ(r.what, tls_session::io_result::state::ok) << client.error();
  ASSERT_EQ(r.bytes, record.size());
  for (uint32_t i = 0; i < 10; ++i) {
    const receive_result got = wait_for(server, wait_limit);
    ASSERT_TRUE(got.msg) << "message " << i << ": " << got.text;
    EXPECT_EQ(got.msg->message_id, i);
  }
}

TEST(tcp_tls_channel, a_wrong_key_fails_on_both_sides) {
  tcp_server_channel server(0, tcp_server_options{0, good_keys()});
  auto client = connect_async(server.port(), wrong_keys());
  EXPECT_FALSE(serve_handshake(server));
  EXPECT_NE(server.last_error().find("TLS handshake with 127.0.0.1:"), std::string::npos)
      << server.last_error();
  EXPECT_NE(server.last_error().find("failed"), std::string::npos) << server.last_error();
  EXPECT_NE(server.last_error().find("wrong key"), std::string::npos) << server.last_error();
  EXPECT_FALSE(server.is_connected());
  status code = status::success;
  const std::string e = client_error(client, &code);
  EXPECT_EQ(code, status::authentication) << e;
  EXPECT_NE(e.find("TLS handshake with " + local(server.port()) + " failed"), std::string::npos)
      << e;
  EXPECT_NE(e.find("wrong key"), std::string::npos) << e;
}

TEST(tcp_tls_channel, an_unknown_identity_is_named_in_the_server_log_text) {
  tcp_server_channel server(0, tcp_server_options{0, good_keys()});
  auto client = connect_async(server.port(), keys("stranger:0011223344556677\n"));
  EXPECT_FALSE(serve_handshake(server));
  EXPECT_NE(server.last_error().find("unknown PSK identity 'stranger'"), std::string::npos)
      << server.last_error();
  EXPECT_NE(client_error(client).find("failed"), std::string::npos);
}

TEST(tcp_tls_channel, a_plain_client_gets_nothing_from_a_tls_server) {
  tcp_server_channel server(0, tcp_server_options{0, good_keys()});
  tcp_client_channel plain(local(server.port()), clock::now() + wait_limit);
  ASSERT_EQ(plain.send(query(1)), status::success);
  EXPECT_FALSE(serve_handshake(server));
  EXPECT_NE(server.last_error().find("TLS handshake with 127.0.0.1:"), std::string::npos)
      << server.last_error();
  EXPECT_NE(server.last_error().find("does not speak TLS"), std::string::npos)
      << server.last_error();
  // The plain client gets no answer: its connection fails (the TLS alert the server sends is no
  // control frame, or the close comes first).
  const receive_result r = wait_for(plain, wait_limit);
  EXPECT_FALSE(r.msg);
  EXPECT_TRUE(r.failed());
  EXPECT_NE(r.code, status::time_out) << r.text;
  EXPECT_FALSE(plain.is_connected());
}

TEST(tcp_tls_channel, a_tls_client_fails_cleanly_against_a_plain_server) {
  tcp_server_channel server(0);
  auto client = connect_async(server.port(), good_keys());
  ASSERT_EQ(wait_until_connected(server, wait_limit), status::success);
  // The ClientHello is no control frame: the plain server drops the connection.
  const receive_result r = wait_for(server, wait_limit);
  EXPECT_TRUE(r.failed());
  EXPECT_FALSE(r.msg);
  status code = status::success;
  const std::string e = client_error(client, &code);
  EXPECT_EQ(code, status::authentication) << e;
  EXPECT_NE(e.find("does not speak TLS"), std::string::npos) << e;
  EXPECT_NE(e.find("TLS handshake with " + local(server.port()) + " failed"), std::string::npos)
      << e;
}

TEST(tcp_tls_channel, an_idle_stranger_is_dropped_after_the_handshake_timeout) {
  tcp_server_channel server(0, tcp_server_options{0, good_keys()});
  zc::test::raw_client stranger(server.port());
  ASSERT_TRUE(stranger.connected());
  EXPECT_FALSE(serve_handshake(server));
  EXPECT_NE(server.last_error().find("timed out"), std::string::npos) << server.last_error();
  EXPECT_TRUE(stranger.read(wait_limit).second);

  // The real client is served next.
  auto client = connect_async(server.port(), good_keys());
  ASSERT_TRUE(serve_handshake(server, server.last_error())) << server.last_error();
  ASSERT_EQ(client.wait_for(wait_limit), std::future_status::ready);
  auto channel = client.get();
  ASSERT_EQ(channel->send(query(7)), status::success);
  const receive_result got = wait_for(server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  EXPECT_EQ(got.msg->message_id, 7u);
}

TEST(tcp_tls_channel, the_client_leaving_is_reported_like_a_plain_close) {
  tls_pair p;
  ASSERT_EQ(p.client->send(query(1)), status::success);
  p.client->close();
  receive_result got = wait_for(p.server, wait_limit);
  ASSERT_TRUE(got.msg) << got.text;
  got = wait_for(p.server, wait_limit);
  EXPECT_EQ(got.code, status::connection_reset) << got.text;
  EXPECT_NE(got.text.find("closed the connection"), std::string::npos) << got.text;
}

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

TEST(tcp_tls_channel, no_descriptor_is_leaked) {
  const size_t before = open_descriptors();
  {
    tcp_server_channel server(0, tcp_server_options{0, good_keys()});
    // A plain stranger and a wrong key turned away, then a real client served and gone.
    tcp_client_channel plain(local(server.port()), clock::now() + wait_limit);
    ASSERT_EQ(plain.send(query(1)), status::success);
    EXPECT_FALSE(serve_handshake(server));
    auto wrong = connect_async(server.port(), wrong_keys());
    EXPECT_FALSE(serve_handshake(server, server.last_error()));
    EXPECT_FALSE(client_error(wrong).empty());
    auto good = connect_async(server.port(), good_keys());
    ASSERT_TRUE(serve_handshake(server, server.last_error())) << server.last_error();
    ASSERT_EQ(good.wait_for(wait_limit), std::future_status::ready);
    auto client = good.get();
    client->close();
    EXPECT_EQ(wait_for(server, wait_limit).code, status::connection_reset);
  }
  EXPECT_EQ(open_descriptors(), before);
}

TEST(tcp_control_channel_listen_address, the_server_binds_only_the_listen_address) {
  // 127.0.0.2 is loopback too on Linux, but a different address from 127.0.0.1.
  tcp_server_channel server(0, tcp_server_options{0x7F000002, nullptr});
  try {
    tcp_client_channel other(local(server.port()), clock::now() + 300ms);
    ADD_FAILURE() << "reached a server bound to 127.0.0.2 through 127.0.0.1";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::time_out) << e.what();  // refused until the deadline
  }
  tcp_client_channel client("127.0.0.2:" + std::to_string(server.port()),
                            clock::now() + wait_limit);
  EXPECT_EQ(wait_until_connected(server, wait_limit), status::success);
  try {
    tcp_server_channel elsewhere(0, tcp_server_options{0x01020304, nullptr});  // not ours
    ADD_FAILURE() << "bound 1.2.3.4";
  } catch (const status_error& e) {
    EXPECT_NE(std::string(e.what()).find("1.2.3.4:0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zc::storage
