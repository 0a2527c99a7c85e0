#include "storage/tcp_control_channel.hpp"

#include "storage/internal/fd_io.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <system_error>
#include <tuple>
#include <utility>

#include "core/log.hpp"
#include "core/thread.hpp"

namespace zc::storage {
using internal::error_text;

namespace {

using clock = std::chrono::steady_clock;

// recv() granularity; control messages are small, so one call usually takes a whole frame.
constexpr size_t read_chunk = 4096;
// The reference used a backlog of 1; a little more lets a rejected extra client get its prompt
// close instead of a connect timeout. A listener of many clients keeps those it cannot take yet
// in its backlog.
constexpr int listen_backlog = 4;
constexpr int listener_backlog = 128;

std::string endpoint_name(const sockaddr_in& addr) {
  return ipv4_endpoint{ntohl(addr.sin_addr.s_addr), ntohs(addr.sin_port)}.to_string();
}

// Control messages are small request/response pairs: Nagle would only add latency.
void set_no_delay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    ZC_SDK_LOG_DEBUG("TCP_NODELAY failed: {}", error_text(errno));
}

// Keepalive with the bound of dead_peer_limit (see the header). Failing to set it is logged, not
// fatal: the connection still works, it only notices a vanished host later.
void set_keepalive(int fd) {
  const int on = 1;
  const int idle = static_cast<int>(keepalive_idle.count());
  const int interval = static_cast<int>(keepalive_interval.count());
  const int probes = keepalive_probes;
  const unsigned user_timeout =
      static_cast<unsigned>(std::chrono::milliseconds(dead_peer_limit).count());
  if (::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) != 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) != 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval)) != 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes)) != 0 ||
      ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout)) != 0)
    ZC_SDK_LOG_WARN("TCP keepalive not set: {}", error_text(errno));
}

unique_fd new_socket() {
  unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd)
    throw status_error(status::operating_system,
                       fmt::format("Failed to create a TCP socket: {}", error_text(errno)));
  return fd;
}

// Waits for a non-blocking connect to finish. Returns 0 or the errno it failed with; ETIMEDOUT
// when the deadline passes first.
int wait_connected(int fd, clock::time_point deadline) {
  for (;;) {
    if (core::stop_requested()) return ECANCELED;
    const auto left = deadline - clock::now();
    if (left <= clock::duration::zero()) return ETIMEDOUT;
    pollfd fds[2] = {{fd, POLLOUT, 0}, {core::stop_signal_fd(), POLLIN, 0}};
    const int ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
    const int n = ::poll(fds, fds[1].fd >= 0 ? 2 : 1, ms);
    if (n < 0 && errno != EINTR) return errno;
    if (n <= 0 || fds[0].revents == 0) continue;
    int err = 0;
    socklen_t len = sizeof(err);
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
    return err;
  }
}

// A listening socket on options.listen_address:port, and the port it got (port 0: the kernel's
// pick). Throws status_error (in_use when the port is taken).
std::pair<unique_fd, uint16_t> listen_on(uint16_t port, const tcp_server_options& options,
                                         int backlog) {
  unique_fd listener = new_socket();
  // SO_REUSEADDR lets a restarted target bind while old connections sit in TIME_WAIT. The
  // reference also set SO_LINGER 0 for that; we do not, since a reset can destroy a final
  // response (shutdown_response) the peer has not read yet.
  int one = 1;
  if (::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
    throw status_error(status::operating_system,
                       fmt::format("Failed to set SO_REUSEADDR: {}", error_text(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(options.listen_address);
  addr.sin_port = htons(port);
  const std::string where = ipv4_endpoint{options.listen_address, port}.to_string();
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    throw status_error(err == EADDRINUSE ? status::in_use : status::operating_system,
                       fmt::format("Failed to listen on {}: {}", where, error_text(err)));
  }
  if (::listen(listener.get(), backlog) != 0)
    throw status_error(status::operating_system,
                       fmt::format("Failed to listen on {}: {}", where, error_text(errno)));
  socklen_t len = sizeof(addr);
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw status_error(status::operating_system,
                       fmt::format("getsockname failed: {}", error_text(errno)));
  return {std::move(listener), ntohs(addr.sin_port)};
}

struct accepted_socket {
  unique_fd socket;
  std::string peer;  // "a.b.c.d:port"
};

// The next connection waiting on `listener` (non-blocking, no delay, keep-alive), or nothing when
// none waits. Throws status_error when accepting fails otherwise (out of descriptors, say).
std::optional<accepted_socket> accept_one(int listener, uint16_t port) {
  for (;;) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    unique_fd client(::accept4(listener, reinterpret_cast<sockaddr*>(&addr), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!client) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return std::nullopt;
      throw status_error(
          status::operating_system,
          fmt::format("control server on port {}: accept failed: {}", port, error_text(errno)));
    }
    set_no_delay(client.get());
    set_keepalive(client.get());
    return accepted_socket{std::move(client), endpoint_name(addr)};
  }
}

void log_connected(uint16_t port, const std::string& who, bool tls) {
  if (tls)
    ZC_SDK_LOG_INFO("control server on port {}: client {} connected, TLS handshake", port, who);
  else
    ZC_SDK_LOG_INFO("control server on port {}: client {} connected", port, who);
}

}  // namespace

// ---- tcp_control_channel -------------------------------------------------------------------

tcp_control_channel::tcp_control_channel(size_t max_body_size,
                                         std::shared_ptr<const psk_file> tls_keys)
    : max_body_size_(max_body_size),
      tls_keys_(std::move(tls_keys)),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
  if (!epoll_)
    throw status_error(status::operating_system,
                       fmt::format("Failed to create an epoll set: {}", error_text(errno)));
  if (tls_keys_) {
    // The handshake deadline wakes the owner through wait_fd(): a silent peer sends nothing that
    // would.
    handshake_timer_.reset(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
    if (!handshake_timer_)
      throw status_error(status::operating_system,
                         fmt::format("Failed to create a timer: {}", error_text(errno)));
    watch_readable(handshake_timer_.get());
  }
}

tcp_control_channel::~tcp_control_channel() = default;

void tcp_control_channel::watch_readable(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
    throw status_error(status::operating_system,
                       fmt::format("Failed to watch a socket: {}", error_text(errno)));
}

bool tcp_control_channel::is_connected() const noexcept {
  return socket_ && (!tls_ || tls_->handshake_done());
}

void tcp_control_channel::attach(unique_fd socket, std::string peer, tls_session::role side) {
  close();
  watch_readable(socket.get());
  socket_ = std::move(socket);
  peer_ = std::move(peer);
  if (!tls_keys_) return;
  try {
    tls_ = std::make_unique<tls_session>(side, tls_keys_, socket_.get());
  } catch (...) {
    close();
    throw;
  }
  handshake_deadline_ = clock::now() + tls_handshake_timeout;
  arm_handshake_timer(true);
}

std::string tcp_control_channel::tls_identity() const {
  return tls_ && tls_->handshake_done() ? tls_->identity() : std::string();
}

void tcp_control_channel::complete_handshake(clock::time_point deadline) {
  const std::string name = peer_;
  for (;;) {
    switch (handshake_step()) {
      case handshake_state::done:
        return;
      case handshake_state::failed:
        throw status_error(status::authentication, last_error_);
      case handshake_state::in_progress:
        break;
    }
    if (core::stop_requested()) {
      close();
      throw status_error(status::shutdown, fmt::format("Stopped the TLS handshake with {}", name));
    }
    const auto left = deadline - clock::now();
    if (left <= clock::duration::zero()) {
      close();
      throw status_error(status::time_out,
                         fmt::format("Timed out in the TLS handshake with {}", name));
    }
    // wait_fd() holds the socket (in the direction GnuTLS waits for) and the handshake timer.
    pollfd fds[2] = {{wait_fd(), POLLIN, 0}, {core::stop_signal_fd(), POLLIN, 0}};
    const int ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
    (void)::poll(fds, fds[1].fd >= 0 ? 2 : 1, ms);
  }
}

void tcp_control_channel::arm_handshake_timer(bool on) noexcept {
  if (!handshake_timer_) return;
  itimerspec spec{};
  if (on) spec.it_value.tv_sec = static_cast<time_t>(tls_handshake_timeout.count());
  // Setting the timer (or disarming it) also clears an expiry nobody read.
  (void)::timerfd_settime(handshake_timer_.get(), 0, &spec, nullptr);
}

bool tcp_control_channel::handshake_timer_fired() noexcept {
  uint64_t expirations = 0;
  return handshake_timer_ &&
         ::read(handshake_timer_.get(), &expirations, sizeof(expirations)) ==
             static_cast<ssize_t>(sizeof(expirations)) &&
         expirations != 0;
}

tcp_control_channel::handshake_state tcp_control_channel::handshake_step() {
  if (!socket_) return handshake_state::failed;
  if (!tls_ || tls_->handshake_done()) return handshake_state::done;
  const bool expired = handshake_timer_fired() || clock::now() >= handshake_deadline_;
  const tls_session::step step = expired ? tls_session::step::failed : tls_->handshake();
  if (step == tls_session::step::done) {
    arm_handshake_timer(false);
    update_interest();
    return handshake_state::done;
  }
  if (step == tls_session::step::again) {
    update_interest();
    return handshake_state::in_progress;
  }
  last_error_ = expired ? fmt::format("TLS handshake with {} timed out after {} s", peer_,
                                      tls_handshake_timeout.count())
                        : fmt::format("TLS handshake with {} failed: {}", peer_, tls_->error());
  close();
  return handshake_state::failed;
}

void tcp_control_channel::close() noexcept {
  if (tls_) {
    tls_->bye();
    tls_.reset();
    arm_handshake_timer(false);
  }
  if (socket_) {
    // Explicit removal: the kernel only drops an fd from the set when its last duplicate closes.
    (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, socket_.get(), nullptr);
    socket_.reset();
  }
  peer_.clear();
  rx_.clear();
  tx_.clear();
  tx_sent_ = 0;
  peer_closed_ = false;
  watching_writable_ = false;
}

receive_result tcp_control_channel::fail(status code, std::string text) {
  ZC_SDK_LOG_DEBUG("control channel: {}", text);
  last_error_ = text;
  close();
  return {std::nullopt, code, std::move(text)};
}

void tcp_control_channel::update_interest() {
  const bool want = pending_send_bytes() != 0 || (handshaking() && tls_->wants_write());
  if (!socket_ || want == watching_writable_) return;
  epoll_event ev{};
  ev.events = EPOLLIN | (want ? EPOLLOUT : 0u);
  ev.data.fd = socket_.get();
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, socket_.get(), &ev) == 0) watching_writable_ = want;
}

status tcp_control_channel::flush() {
  while (tls_ && tx_sent_ < tx_.size()) {
    // One record per call; bytes GnuTLS could not send yet stay queued here (and counted by
    // pending_send_bytes()) until a later call with the same bytes completes them.
    const tls_session::io_result r = tls_->send(tx_.data() + tx_sent_, tx_.size() - tx_sent_);
    if (r.what == tls_session::io_result::state::ok) {
      tx_sent_ += r.bytes;
      continue;
    }
    if (r.what == tls_session::io_result::state::again) break;
    return fail(status::io_failed, fmt::format("send to {} failed: {}", peer_, tls_->error())).code;
  }
  while (!tls_ && tx_sent_ < tx_.size()) {
    // MSG_NOSIGNAL: a peer that went away must be an error code here, not a SIGPIPE.
    const ssize_t n =
        ::send(socket_.get(), tx_.data() + tx_sent_, tx_.size() - tx_sent_, MSG_NOSIGNAL);
    if (n > 0) {
      tx_sent_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    // A full socket is normal back-pressure (the reference treated it as fatal): keep the rest
    // queued and let EPOLLOUT wake the owner to flush it.
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    const int err = n < 0 ? errno : EPIPE;
    const status code =
        err == EPIPE || err == ECONNRESET ? status::connection_reset : status::io_failed;
    return fail(code, fmt::format("send to {} failed: {}", peer_, error_text(err))).code;
  }
  if (tx_sent_ == tx_.size()) {
    tx_.clear();
    tx_sent_ = 0;
  }
  update_interest();
  return status::success;
}

status tcp_control_channel::send(const message& msg) {
  if (!is_connected()) {
    last_error_ = "control channel is not connected";
    return status::not_connected;
  }
  const size_t before = tx_.size();
  try {
    encode_to(msg, tx_);
  } catch (const status_error& e) {
    last_error_ = e.what();
    return e.code();
  }
  const size_t body = tx_.size() - before - frame_header_size;
  if (body > max_body_size_) {
    tx_.resize(before);
    last_error_ = fmt::format("{} body of {} bytes exceeds the channel maximum of {}",
                              to_string(msg.type), body, max_body_size_);
    return status::too_big;
  }
  if (pending_send_bytes() > max_pending_send_bytes) {
    tx_.resize(before);
    last_error_ = fmt::format("{} not sent: {} bytes already queued for {}", to_string(msg.type),
                              pending_send_bytes(), peer_);
    return status::full;
  }
  return flush();
}

std::optional<receive_result> tcp_control_channel::read_available() {
  // One frame's worth of buffered bytes is enough to decode a message or find an error; reading
  // further would let a peer make us buffer without bound.
  const size_t cap = frame_header_size + max_body_size_;
  while (!peer_closed_ && rx_.size() < cap) {
    const size_t old = rx_.size();
    const size_t want = std::min(read_chunk, cap - old);
    rx_.resize(old + want);
    if (tls_) {
      // Read until GnuTLS reports AGAIN: a short record says nothing about what the socket (or
      // GnuTLS's own buffer) still holds, and the owner only sleeps once poll() comes back empty.
      const tls_session::io_result r = tls_->recv(rx_.data() + old, want);
      rx_.resize(old + r.bytes);
      if (r.what == tls_session::io_result::state::ok) continue;
      if (r.what == tls_session::io_result::state::closed) peer_closed_ = true;
      if (r.what != tls_session::io_result::state::failed) break;
      return fail(status::io_failed,
                  fmt::format("receive from {} failed: {}", peer_, tls_->error()));
    }
    const ssize_t n = ::recv(socket_.get(), rx_.data() + old, want, 0);
    const int err = n < 0 ? errno : 0;
    rx_.resize(old + static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n > 0) {
      if (static_cast<size_t>(n) < want) break;  // drained for now
      continue;
    }
    if (n == 0) {
      // The reference read this as "no data" and never noticed a dead peer.
      peer_closed_ = true;
      break;
    }
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) break;
    return fail(err == ECONNRESET ? status::connection_reset : status::io_failed,
                fmt::format("receive from {} failed: {}", peer_, error_text(err)));
  }
  return std::nullopt;
}

bool tcp_control_channel::take_frame(receive_result& out) {
  if (rx_.empty()) return false;
  decode_result r = decode_frame(rx_, max_body_size_);
  switch (r.outcome) {
    case decode_outcome::need_more:
      return false;
    case decode_outcome::message:
      rx_.erase(rx_.begin(), rx_.begin() + static_cast<std::ptrdiff_t>(r.consumed));
      out.msg = std::move(r.msg);
      return true;
    case decode_outcome::error:
      // The stream cannot be resynchronised after a bad frame: drop the connection.
      out =
          fail(r.error, fmt::format("malformed control message from {}: {}", peer_, r.error_text));
      return true;
  }
  return false;
}

receive_result tcp_control_channel::poll() {
  receive_result out;
  if (!is_connected()) return out;
  if (pending_send_bytes() != 0) {
    const status s = flush();
    if (!ok(s)) return {std::nullopt, s, last_error_};
  }
  if (take_frame(out)) return out;
  if (auto failure = read_available()) return std::move(*failure);
  if (take_frame(out)) return out;
  if (peer_closed_) {
    return fail(status::connection_reset,
                rx_.empty() ? fmt::format("peer {} closed the connection", peer_)
                            : fmt::format("peer {} closed the connection in the middle of a "
                                          "frame ({} bytes pending)",
                                          peer_, rx_.size()));
  }
  return out;
}

// ---- tcp_server_channel --------------------------------------------------------------------

tcp_server_channel::tcp_server_channel(uint16_t port, size_t max_body_size)
    : tcp_server_channel(port, tcp_server_options{}, max_body_size) {}

tcp_server_channel::tcp_server_channel(uint16_t port, const tcp_server_options& options,
                                       size_t max_body_size)
    : tcp_control_channel(max_body_size, options.tls) {
  std::tie(listener_, port_) = listen_on(port, options, listen_backlog);
  watch_readable(listener_.get());
}

bool tcp_server_channel::accept_pending() {
  bool took = false;
  for (;;) {
    std::optional<accepted_socket> client;
    try {
      client = accept_one(listener_.get(), port_);
    } catch (const status_error& e) {
      ZC_SDK_LOG_ERROR("{}", e.what());
      return took;
    }
    if (!client) return took;
    if (holds_socket()) {
      // One session per target: a second client is turned away now rather than left waiting
      // in the backlog for a session that will never come.
      ZC_SDK_LOG_WARN("control server on port {}: rejected client {} while {} {}", port_,
                      client->peer, handshaking() ? "in a TLS handshake with" : "serving", peer());
      continue;  // its socket closes here
    }
    log_connected(port_, client->peer, uses_tls());
    attach(std::move(client->socket), std::move(client->peer), tls_session::role::server);
    took = true;
  }
}

void tcp_server_channel::step_client_handshake() {
  const std::string who = peer();
  switch (handshake_step()) {
    case handshake_state::done:
      ZC_SDK_LOG_INFO("control server on port {}: TLS session with {} established (identity '{}')",
                      port_, who, tls()->identity());
      break;
    case handshake_state::failed:
      // Never the owner's business: it only ever sees clients that hold the key.
      ZC_SDK_LOG_WARN("control server on port {}: {}", port_, last_error());
      break;
    case handshake_state::in_progress:
      break;
  }
}

receive_result tcp_server_channel::poll() {
  // The poll() that takes a new client (or finishes its TLS handshake) returns no message
  // (control_channel's contract).
  if (!is_connected()) {
    accept_pending();  // takes one client when free, turns the others away
    if (handshaking()) step_client_handshake();
    return {};
  }
  // The current client first: if it has just left, that is reported now and the client queued
  // behind it is accepted by the next poll(), not turned away as a second client.
  receive_result current = tcp_control_channel::poll();
  if (current.failed() || current.msg) return current;
  accept_pending();  // still connected: anyone new is rejected
  return current;
}

// ---- tcp_listener ----------------------------------------------------------------------------

tcp_accepted_channel::tcp_accepted_channel(unique_fd socket, std::string peer,
                                           std::shared_ptr<const psk_file> tls,
                                           size_t max_body_size)
    : tcp_control_channel(max_body_size, std::move(tls)) {
  attach(std::move(socket), std::move(peer), tls_session::role::server);
}

tcp_listener::tcp_listener(uint16_t port, const tcp_server_options& options, size_t max_body_size)
    : tls_(options.tls), max_body_size_(max_body_size) {
  std::tie(listener_, port_) = listen_on(port, options, listener_backlog);
}

std::unique_ptr<tcp_accepted_channel> tcp_listener::accept() {
  auto client = accept_one(listener_.get(), port_);
  if (!client) return nullptr;
  log_connected(port_, client->peer, tls_ != nullptr);
  return std::make_unique<tcp_accepted_channel>(std::move(client->socket), std::move(client->peer),
                                                tls_, max_body_size_);
}

// ---- tcp_client_channel --------------------------------------------------------------------

tcp_client_channel::tcp_client_channel(std::string_view address, clock::time_point deadline,
                                       size_t max_body_size)
    : tcp_client_channel(address, deadline, nullptr, max_body_size) {}

tcp_client_channel::tcp_client_channel(std::string_view address, clock::time_point deadline,
                                       std::shared_ptr<const psk_file> tls_keys,
                                       size_t max_body_size)
    : tcp_control_channel(max_body_size, std::move(tls_keys)),
      endpoint_(parse_ipv4_endpoint(address)) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(endpoint_.address);
  addr.sin_port = htons(endpoint_.port);
  const std::string name = endpoint_.to_string();

  for (;;) {
    unique_fd fd = new_socket();
    int err = 0;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      err = errno;
      if (err == EINPROGRESS || err == EINTR) err = wait_connected(fd.get(), deadline);
    }
    if (err == 0) {
      set_no_delay(fd.get());
      set_keepalive(fd.get());
      attach(std::move(fd), name, tls_session::role::client);
      if (uses_tls()) {
        complete_handshake(deadline);
        ZC_SDK_LOG_INFO("control client connected to {} (TLS, identity '{}')", name,
                        this->tls_keys()->entries.front().identity);
      } else {
        ZC_SDK_LOG_INFO("control client connected to {}", name);
      }
      return;
    }
    if (err == ECANCELED || core::stop_requested())
      throw status_error(status::shutdown, fmt::format("Stopped connecting to {}", name));
    if (err == ETIMEDOUT)
      throw status_error(status::time_out, fmt::format("Timed out connecting to {}", name));
    if (err != ECONNREFUSED)
      throw status_error(status::not_connected,
                         fmt::format("Failed to connect to {}: {}", name, error_text(err)));
    // Refused: the server is not listening yet. Retry until the deadline.
    const auto now = clock::now();
    if (now >= deadline)
      throw status_error(status::time_out,
                         fmt::format("Timed out connecting to {}: connection refused", name));
    (void)core::sleep_unless_stopped(std::min(now + connect_retry_interval, deadline));
  }
}

}  // namespace zc::storage
