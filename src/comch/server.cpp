#include "comch/server.hpp"

#include <fmt/format.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comch/address.hpp"
#include "comch/internal/poller.hpp"
#include "comch/internal/unix_socket.hpp"
#include "core/log.hpp"

namespace zc::comch {
namespace {

constexpr int listen_backlog = 64;

void check_sizes(uint32_t max_msg_size, uint32_t recv_queue_size, uint32_t send_tasks) {
  if (max_msg_size == 0 || max_msg_size > max_msg_size_limit)
    throw status_error(status::bad_config, fmt::format("comch max message size {} is outside 1..{}",
                                                       max_msg_size, max_msg_size_limit));
  if (recv_queue_size == 0 || send_tasks == 0)
    throw status_error(status::bad_config,
                       "comch receive queue size and send task count must not be zero");
}

}  // namespace

server::server(core::progress_engine& engine, server_config config)
    : core::context(engine), config_(std::move(config)) {
  if (config_.name.empty()) throw status_error(status::bad_config, "comch server needs a name");
  check_sizes(config_.max_msg_size, config_.recv_queue_size, config_.send_tasks);
  poller_ = std::make_unique<internal::poller>();
  send_pool_.configure(*this, config_.send_tasks, config_.on_send_done, config_.on_send_error);
}

server::~server() {
  if (state() != core::context_state::idle)
    ZC_SDK_LOG_ERROR("comch server \"{}\" destroyed while {}; stop it first", config_.name,
                     to_string(state()));
  quiet_ = true;
  for (auto& c : connections_) c->close(status::shutdown);
  poller_->close_listener(listener_);
  listener_ = -1;
  if (made_socket_file_)
    internal::remove_socket_file(socket_directory_, socket_path_, socket_file_);
  engine().detach(*this);  // before our wait_fd closes
}

core::context_state server::on_start() {
  const std::string host_function = server_host_function(config_.representor);
  socket_directory_ = internal::socket_directory();
  socket_path_ = comch::socket_path(socket_directory_, host_function, config_.name);
  internal::socket_file_id created;
  listener_ =
      internal::listen_in_directory(socket_directory_, socket_path_, listen_backlog, created);
  if (listener_ < 0) {
    if (errno == EADDRINUSE)
      throw status_error(status::in_use,
                         fmt::format("comch channel \"{}\" is already served for host function "
                                     "\"{}\" ({})",
                                     config_.name, host_function, socket_path_));
    if (errno == EEXIST)
      throw status_error(status::already_exist,
                         fmt::format("comch server \"{}\": {} is in the way and is not a socket",
                                     config_.name, socket_path_));
    throw status_error(status::operating_system,
                       fmt::format("comch server \"{}\": cannot listen on {}: {}", config_.name,
                                   socket_path_, std::strerror(errno)));
  }
  socket_file_ = created;
  made_socket_file_ = true;
  try {
    poller_->watch_listener(listener_);
  } catch (...) {
    internal::close_fd(listener_);
    listener_ = -1;
    throw;
  }
  ZC_SDK_LOG_DEBUG("comch server \"{}\" listening on {}", config_.name, socket_path_);
  return core::context_state::running;
}

void server::on_stop() {
  poller_->close_listener(listener_);
  listener_ = -1;
  // Index loop: a disconnect callback may call disconnect() on another connection.
  for (size_t i = 0; i < connections_.size(); ++i) connections_[i]->close(status::shutdown);
}

size_t server::poll() {
  if (!closed_.empty() && inflight() == 0)
    std::erase_if(closed_, [](const std::unique_ptr<connection>& c) { return !c->pinned(); });
  if (accept_paused_ && handshakes() < max_handshakes &&
      core::steady_clock::now() >= accept_resumes_at_) {
    accept_resumes_at_ = {};
    pause_accepting(false);
  }
  return poller_->run(connections_, closed_, [this] { return accept_all(); });
}

size_t server::handshakes() const noexcept {
  return static_cast<size_t>(
      std::count_if(connections_.begin(), connections_.end(),
                    [](const auto& c) { return c->phase_ == connection::phase::handshake; }));
}

void server::pause_accepting(bool paused) noexcept {
  if (accept_paused_ == paused) return;
  accept_paused_ = paused;
  poller_->pause_listener(listener_, paused);
}

int server::wait_fd() const {
  return poller_ ? poller_->fd() : -1;
}

bool server::arm() {
  return !internal::poller::has_backlog(connections_);
}

core::steady_clock::time_point server::next_deadline() const {
  const auto handshake = internal::poller::next_deadline(connections_);
  // A listener resting after a failed accept comes back at its time.
  if (accept_paused_ && accept_resumes_at_ > core::steady_clock::time_point{})
    return std::min(handshake, accept_resumes_at_);
  return handshake;
}

size_t server::accept_all() {
  size_t accepted = 0;
  while (listener_ >= 0) {
    if (handshakes() >= max_handshakes) {
      // Peers that connect and never say hello: the next ones wait in the backlog until these
      // finish or time out (handshake_timeout), and the listener stops waking the engine.
      pause_accepting(true);
      break;
    }
    int fd = accept4(listener_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of descriptors or memory: the listener stays readable, so it rests a moment
        // instead of waking the engine on every pass.
        ZC_SDK_LOG_ERROR("comch server \"{}\": accept failed: {}; accepting again in {} ms",
                         config_.name, std::strerror(errno), accept_backoff.count());
        accept_resumes_at_ = core::steady_clock::now() + accept_backoff;
        pause_accepting(true);
      }
      break;
    }
    ++accepted;
    internal::peer_credentials peer;
    if (!internal::peer_of(fd, peer)) {
      ZC_SDK_LOG_ERROR("comch server \"{}\": no credentials for a new peer; dropped", config_.name);
      internal::close_fd(fd);
      continue;
    }
    std::unique_ptr<connection> c;
    try {
      c.reset(new connection(*this, *this, fd, false, next_connection_id_++, peer,
                             config_.max_msg_size, config_.recv_queue_size, poller_->mailbox()));
      poller_->watch(*c);
      connections_.push_back(std::move(c));
    } catch (const std::exception& e) {
      // Out of descriptors or memory for the peer's link: that peer is dropped (a connection
      // built closes its socket as it goes), the listener rests, and every other peer goes on.
      if (!c) internal::close_fd(fd);
      ZC_SDK_LOG_ERROR("comch server \"{}\": cannot take peer pid {}: {}; accepting again in {} ms",
                       config_.name, peer.pid, e.what(), accept_backoff.count());
      accept_resumes_at_ = core::steady_clock::now() + accept_backoff;
      pause_accepting(true);
      break;
    }
    connection& added = *connections_.back();
    if (peer.uid != geteuid()) {
      added.refuse(status::not_permitted,
                   fmt::format("comch server \"{}\" serves uid {} only; peer pid {} runs as uid {}",
                               config_.name, geteuid(), peer.pid, peer.uid));
    }
  }
  return accepted;
}

send_task* server::allocate_send(connection& to, std::span<const uint8_t> message) noexcept {
  send_task* t = send_pool_.allocate();
  if (t == nullptr) return nullptr;
  t->connection_ = &to;
  t->message_ = message;
  return t;
}

status server::submit(send_task& task) noexcept {
  if (state() != core::context_state::running) return status::bad_state;
  connection* c = task.connection_;
  if (c == nullptr || &c->owner() != this || !c->connected()) return status::not_connected;
  if (task.message_.size() > c->max_send_size()) return status::too_big;
  try {
    c->drain_outbox();  // consumer announcements posted before this message go first
    task_submitted();
    c->queue_message(task);
  } catch (const std::bad_alloc&) {
    return status::no_memory;
  }
  poller_->update(*c);
  return status::success;
}

void server::disconnect(connection& c) {
  c.close(status::shutdown);
}

size_t server::connection_count() const noexcept {
  return static_cast<size_t>(std::count_if(connections_.begin(), connections_.end(),
                                           [](const auto& c) { return c->connected(); }));
}

void server::connection_established(connection& c) {
  ZC_SDK_LOG_DEBUG("comch server \"{}\": connection {} from pid {}", config_.name, c.id(),
                   c.peer_pid());
  if (config_.on_connect && !quiet_) config_.on_connect(c);
}

void server::connection_closed(connection& c, status why, bool was_established) {
  if (!was_established) {
    if (why == status::not_permitted || why == status::unsupported_version) ++refused_peers_;
    return;
  }
  ZC_SDK_LOG_DEBUG("comch server \"{}\": connection {} closed ({})", config_.name, c.id(),
                   status_name(why));
  if (config_.on_disconnect && !quiet_) config_.on_disconnect(c);
}

void server::message_received(connection& c, std::span<const uint8_t> message) {
  if (config_.events.on_message && !quiet_) config_.events.on_message(c, message);
}

void server::consumer_event(connection& c, uint32_t consumer_id, bool created) {
  if (quiet_) return;
  auto& cb = created ? config_.events.on_consumer_new : config_.events.on_consumer_expired;
  if (cb) cb(c, consumer_id);
}

void server::send_finished(send_task& task, status result) noexcept {
  if (!quiet_) complete(task, result);
}

}  // namespace zc::comch
