// Control channels over TCP/IPv4 (REFERENCE_SPEC §2.1: service = client, target = server).
// Non-blocking sockets; sends that the socket cannot take yet are queued and flushed by later
// send()/poll() calls. Thread rules: those of control_channel (one owning thread).
// With a pre-shared key (--tls-psk) every connection is TLS 1.3 PSK (tls_psk.hpp): the same frames
// ride inside TLS records, and a peer without the key never gets a frame through. Without one the
// bytes on the wire are the reference's.
//
//   tcp_server_channel server{listen_port};                  // one client at a time (tests)
//   tcp_client_channel client{"192.168.1.20:1234", deadline}; // service
//   tcp_server_channel tls_server{listen_port, {.tls = keys}};          // with --tls-psk
//   tcp_client_channel tls_client{"192.168.1.20:1234", deadline, keys};
//
//   tcp_listener listener{listen_port, {.tls = keys}};       // target, many clients at once
//   if (auto client = listener.accept()) {                   // when listener.wait_fd() reads
//     client->complete_handshake(deadline);                  // on the client's own thread
//     ... client->poll() / send() ...
//   }
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/control_channel.hpp"
#include "storage/ipv4_endpoint.hpp"
#include "storage/tls_psk.hpp"
#include "storage/unique_fd.hpp"

namespace zc::storage {

// Most bytes a channel queues for a peer that is not reading: many control messages' worth. Past
// it send() returns full rather than growing without bound.
inline constexpr size_t max_pending_send_bytes = 1024 * 1024;
// How long a client waits before retrying a refused connect (the server is not listening yet).
inline constexpr std::chrono::milliseconds connect_retry_interval{100};

// How long a control peer may take to answer: the reference's --control-timeout default.
inline constexpr std::chrono::seconds default_control_timeout{5};
// TCP keepalive on every control connection. A peer host that vanishes without a FIN or a reset
// (power loss, a cut link) would otherwise hold a target's session forever; with these, the
// connection fails after keepalive_idle of silence plus keepalive_probes unanswered probes
// keepalive_interval apart: dead_peer_limit, twice the control timeout. TCP_USER_TIMEOUT gives
// the same bound to data sent and never acknowledged, which keepalive does not probe.
inline constexpr std::chrono::seconds keepalive_idle = default_control_timeout;
inline constexpr std::chrono::seconds keepalive_interval{1};
inline constexpr int keepalive_probes =
    static_cast<int>(default_control_timeout / keepalive_interval);
inline constexpr std::chrono::seconds dead_peer_limit =
    keepalive_idle + keepalive_probes * keepalive_interval;

// The framed stream over one connected socket; the server and client below only differ in how
// they get that socket.
class tcp_control_channel : public control_channel {
 public:
  ~tcp_control_channel() override;
  tcp_control_channel(const tcp_control_channel&) = delete;
  tcp_control_channel& operator=(const tcp_control_channel&) = delete;

  [[nodiscard]] status send(const message& msg) override;
  [[nodiscard]] receive_result poll() override;
  // With TLS: once the handshake is done (a peer still in its handshake is not connected).
  bool is_connected() const noexcept override;
  // An epoll descriptor holding the connection (and a server's listening socket, and the TLS
  // handshake timer).
  int wait_fd() const noexcept override { return epoll_.get(); }
  void close() noexcept override;
  const std::string& last_error() const noexcept override { return last_error_; }

  size_t max_body_size() const noexcept { return max_body_size_; }
  // Bytes queued by send() that the socket has not taken yet.
  size_t pending_send_bytes() const noexcept { return tx_.size() - tx_sent_; }
  // "a.b.c.d:port" of the connected peer, empty when not connected.
  const std::string& peer() const noexcept { return peer_; }
  // The connected socket (-1 when not connected), for socket options and diagnostics.
  int native_handle() const noexcept { return socket_.get(); }
  // Whether connections are TLS (a key file was given).
  bool uses_tls() const noexcept { return static_cast<bool>(tls_keys_); }
  // The identity the peer's key was found under; empty without TLS or before the handshake.
  std::string tls_identity() const;

  // Drives a fresh connection's TLS handshake to its end, sleeping in between (returns at once
  // without TLS). Throws status_error: authentication with "TLS handshake with a.b.c.d:port
  // failed: ..." (or "... timed out ...") when the peer has no matching key, does not speak TLS
  // or is too slow; time_out at `deadline`; shutdown when a stop is requested. The connection is
  // closed when it throws.
  void complete_handshake(std::chrono::steady_clock::time_point deadline);

 protected:
  // `tls_keys`: null for the plain protocol.
  tcp_control_channel(size_t max_body_size, std::shared_ptr<const psk_file> tls_keys);
  // Takes a connected, non-blocking socket. With TLS its handshake starts (handshake_step()), and
  // must end within tls_handshake_timeout.
  void attach(unique_fd socket, std::string peer, tls_session::role side);
  // Adds `fd` to the wait_fd() set for readability.
  void watch_readable(int fd);
  // A socket is held: connected, or in its TLS handshake.
  bool holds_socket() const noexcept { return static_cast<bool>(socket_); }
  bool handshaking() const noexcept { return socket_ && tls_ && !tls_->handshake_done(); }
  const tls_session* tls() const noexcept { return tls_.get(); }
  const std::shared_ptr<const psk_file>& tls_keys() const noexcept { return tls_keys_; }

  enum class handshake_state { done, in_progress, failed };
  // Moves a TLS handshake on without blocking. `failed` (bad key, not TLS, the peer left, the
  // timeout passed): the connection is closed and last_error() says "TLS handshake with
  // a.b.c.d:port failed: ..." or "... timed out ...".
  handshake_state handshake_step();

 private:
  // Writes queued bytes until done or the socket is full; a hard error closes the connection.
  status flush();
  // Reads what the socket has (bounded by one maximum frame of buffered bytes); a failure result
  // when the connection broke.
  std::optional<receive_result> read_available();
  // Decodes one buffered frame into `out`; true when `out` is final (a message or a failure).
  bool take_frame(receive_result& out);
  receive_result fail(status code, std::string text);
  void update_interest();
  void arm_handshake_timer(bool on) noexcept;
  // True when the handshake timer has fired (and clears it).
  bool handshake_timer_fired() noexcept;

  size_t max_body_size_;
  std::shared_ptr<const psk_file> tls_keys_;
  unique_fd epoll_;
  unique_fd handshake_timer_;  // a timerfd in the epoll set, with TLS only
  std::chrono::steady_clock::time_point handshake_deadline_;
  std::unique_ptr<tls_session> tls_;  // the connection's TLS, with TLS only
  unique_fd socket_;
  std::string peer_;
  std::vector<uint8_t> rx_;  // received bytes not decoded yet
  std::vector<uint8_t> tx_;  // encoded frames; [tx_sent_, size) not written yet
  size_t tx_sent_ = 0;
  bool peer_closed_ = false;  // read() returned 0; buffered frames are still delivered
  bool watching_writable_ = false;
  std::string last_error_;
};

// What a server listens on and how it authenticates.
struct tcp_server_options {
  uint32_t listen_address = 0;          // host byte order; 0 = 0.0.0.0, every address
  std::shared_ptr<const psk_file> tls;  // null: the plain protocol
};

// Listens on listen_address:port and serves one client at a time. A client that arrives while
// another is served (or is in its TLS handshake) is accepted and closed at once (and logged),
// never queued. After its client leaves, the server accepts the next one. With TLS a client only
// counts as connected after its handshake: one that fails it or does not finish it within
// tls_handshake_timeout is logged ("TLS handshake with a.b.c.d:port failed: ..."), closed, and
// never seen by the owner, and the server takes the next client. (The target serves through
// tcp_listener; this one-client form is what tests use as a stand-in target.)
class tcp_server_channel final : public tcp_control_channel {
 public:
  // port 0 picks a free port (see port()). Throws status_error when the port cannot be bound.
  explicit tcp_server_channel(uint16_t port, size_t max_body_size = default_max_body_size);
  tcp_server_channel(uint16_t port, const tcp_server_options& options,
                     size_t max_body_size = default_max_body_size);

  [[nodiscard]] receive_result poll() override;
  uint16_t port() const noexcept { return port_; }

 private:
  // Accepts every pending connection; true when one became this channel's client.
  bool accept_pending();

  // Moves a client's TLS handshake on and logs how it ended.
  void step_client_handshake();

  unique_fd listener_;
  uint16_t port_ = 0;
};

// One client of a tcp_listener, for exactly that client: it never takes another. Made with its
// socket set up (no delay, keep-alive) and, with TLS, its handshake started: the owner completes
// it (complete_handshake) before the client counts as connected.
class tcp_accepted_channel final : public tcp_control_channel {
 public:
  // A socket accept4() returned (non-blocking), named `peer` ("a.b.c.d:port").
  tcp_accepted_channel(unique_fd socket, std::string peer, std::shared_ptr<const psk_file> tls,
                       size_t max_body_size = default_max_body_size);
};

// Listens on listen_address:port and hands every client over as its own channel, for a server
// that serves several at once (each on its own thread; the listener is its owner's). The options
// and the errors are those of tcp_server_channel.
class tcp_listener {
 public:
  // port 0 picks a free port (see port()). Throws status_error when the port cannot be bound.
  tcp_listener(uint16_t port, const tcp_server_options& options,
               size_t max_body_size = default_max_body_size);

  uint16_t port() const noexcept { return port_; }
  // Readable while a client waits to be accepted.
  int wait_fd() const noexcept { return listener_.get(); }
  // The next client waiting (logged), or null when none does. Never blocks. Throws status_error
  // when accepting fails (out of descriptors) or the client's channel cannot be made; the
  // listener stays usable.
  std::unique_ptr<tcp_accepted_channel> accept();

 private:
  unique_fd listener_;
  uint16_t port_ = 0;
  std::shared_ptr<const psk_file> tls_;
  size_t max_body_size_;
};

// Connects to a server. No reconnection once the connection is lost.
class tcp_client_channel final : public tcp_control_channel {
 public:
  // Connects to "a.b.c.d:port", retrying every connect_retry_interval while the connection is
  // refused (the server may still be starting), until `deadline`. Throws status_error:
  // invalid_value for a bad address, time_out at the deadline, shutdown when a stop is requested,
  // not_connected for any other failure.
  tcp_client_channel(std::string_view address, std::chrono::steady_clock::time_point deadline,
                     size_t max_body_size = default_max_body_size);
  // The same with TLS when `tls_keys` is not null: the constructor also completes the handshake
  // with the first key of the file (by `deadline`, and within tls_handshake_timeout), and throws
  // status_error(authentication) with "TLS handshake with a.b.c.d:port failed: ..." when the
  // server refuses the key or does not speak TLS.
  tcp_client_channel(std::string_view address, std::chrono::steady_clock::time_point deadline,
                     std::shared_ptr<const psk_file> tls_keys,
                     size_t max_body_size = default_max_body_size);

  const ipv4_endpoint& endpoint() const noexcept { return endpoint_; }

 private:
  ipv4_endpoint endpoint_;
};

}  // namespace zc::storage
