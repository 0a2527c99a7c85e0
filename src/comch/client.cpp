#include "comch/client.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "comch/address.hpp"
#include "comch/internal/poller.hpp"
#include "comch/internal/socket_dir.hpp"
#include "comch/internal/unix_socket.hpp"
#include "core/log.hpp"

namespace zc::comch {
namespace {
// Between two dials while waiting for a server to appear.
constexpr std::chrono::milliseconds redial_interval{10};
}  // namespace

client::client(core::progress_engine& engine, client_config config)
    : core::context(engine), config_(std::move(config)) {
  if (config_.name.empty()) throw status_error(status::bad_config, "comch client needs a name");
  if (config_.max_msg_size == 0 || config_.max_msg_size > max_msg_size_limit ||
      config_.recv_queue_size == 0 || config_.send_tasks == 0)
    throw status_error(status::bad_config,
                       fmt::format("comch client: max message size must be 1..{}, queue size "
                                   "and send tasks non-zero",
                                   max_msg_size_limit));
  poller_ = std::make_unique<internal::poller>();
  send_pool_.configure(*this, config_.send_tasks, config_.on_send_done, config_.on_send_error);
}

client::~client() {
  if (state() != core::context_state::idle)
    ZC_SDK_LOG_ERROR("comch client \"{}\" destroyed while {}; stop it first", config_.name,
                     to_string(state()));
  quiet_ = true;
  for (auto& c : connection_) c->close(status::shutdown);
  engine().detach(*this);  // before our wait_fd closes
}

bool client::dial() {
  for (const std::string& path : socket_paths_) {
    int fd = internal::connect_unix(path);
    if (fd < 0) {
      if (errno == ECONNREFUSED || errno == ENOENT) continue;  // nobody listens on this one
      if (errno == EAGAIN) return false;                       // its backlog is full: retry
      throw status_error(status::operating_system,
                         fmt::format("comch client: cannot connect to \"{}\": {}", config_.name,
                                     std::strerror(errno)));
    }
    internal::peer_credentials peer;
    if (!internal::peer_of(fd, peer)) {
      internal::close_fd(fd);
      throw status_error(status::operating_system, "comch client: no credentials for the server");
    }
    // Our socket directory lets no other user in, but a server of another user is no peer of
    // ours wherever we found it (root reaches any directory). Only talk to our own user.
    if (peer.uid != geteuid()) {
      internal::close_fd(fd);
      ZC_SDK_LOG_WARN("comch client: server \"{}\" (pid {}) runs as uid {}, not uid {}; refused",
                      config_.name, peer.pid, peer.uid, geteuid());
      throw status_error(
          status::not_permitted,
          fmt::format("comch server \"{}\" runs as another user (uid {})", config_.name, peer.uid));
    }
    std::unique_ptr<connection> c(new connection(*this, *this, fd, true, 1, peer,
                                                 config_.max_msg_size, config_.recv_queue_size,
                                                 poller_->mailbox()));
    poller_->watch(*c);
    connection_.push_back(std::move(c));
    connection_.back()->send_hello();
    return true;
  }
  return false;
}

core::context_state client::on_start() {
  last_error_ = status::success;
  // A closed connection from an earlier run; freed by poll(), as start() may run inside one of
  // its callbacks.
  for (auto& c : connection_) closed_.push_back(std::move(c));
  connection_.clear();
  socket_paths_ = client_socket_paths(internal::socket_directory(), config_.device, config_.name);
  if (dial()) return core::context_state::starting;
  if (config_.connect_timeout.count() <= 0)
    throw status_error(status::not_found,
                       fmt::format("no comch server named \"{}\" for device \"{}\"", config_.name,
                                   config_.device));
  dialling_ = true;
  give_up_at_ = core::steady_clock::now() + config_.connect_timeout;
  next_dial_ = core::steady_clock::now() + redial_interval;
  return core::context_state::starting;
}

void client::on_stop() {
  dialling_ = false;
  for (auto& c : connection_) c->close(status::shutdown);
}

void client::fail_start(status why, const std::string& message) {
  ZC_SDK_LOG_ERROR("comch client: {}", message);
  dialling_ = false;
  last_error_ = why;
  set_state(core::context_state::idle);
}

size_t client::poll() {
  if (!closed_.empty() && inflight() == 0) closed_.clear();
  size_t work = 0;
  if (dialling_ && state() == core::context_state::starting) {
    auto now = core::steady_clock::now();
    if (now >= next_dial_) {
      ++work;
      try {
        if (dial()) {
          dialling_ = false;
        } else if (now >= give_up_at_) {
          fail_start(status::not_found,
                     fmt::format("no comch server named \"{}\" for device \"{}\" after {} ms",
                                 config_.name, config_.device, config_.connect_timeout.count()));
        } else {
          next_dial_ = now + redial_interval;
        }
      } catch (const status_error& e) {
        fail_start(e.code(), e.what());
      } catch (const std::exception& e) {
        fail_start(status::operating_system, e.what());
      }
    }
  }
  return work + poller_->run(connection_, closed_, [] { return size_t{0}; });
}

int client::wait_fd() const {
  return poller_ ? poller_->fd() : -1;
}

bool client::arm() {
  return !internal::poller::has_backlog(connection_);
}

core::steady_clock::time_point client::next_deadline() const {
  auto deadline = internal::poller::next_deadline(connection_);
  if (dialling_) deadline = std::min(deadline, next_dial_);
  return deadline;
}

connection* client::get_connection() const noexcept {
  for (const auto& c : connection_)
    if (c->connected()) return c.get();
  return nullptr;
}

send_task* client::allocate_send(std::span<const uint8_t> message) noexcept {
  send_task* t = send_pool_.allocate();
  if (t == nullptr) return nullptr;
  t->connection_ = get_connection();
  t->message_ = message;
  return t;
}

status client::submit(send_task& task) noexcept {
  if (state() != core::context_state::running) return status::bad_state;
  connection* c = get_connection();
  if (c == nullptr) return status::not_connected;
  task.connection_ = c;
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

void client::connection_established(connection& c) {
  ZC_SDK_LOG_DEBUG("comch client: connected to \"{}\" (server pid {})", config_.name, c.peer_pid());
  if (state() == core::context_state::starting) set_state(core::context_state::running);
}

void client::connection_closed(connection&, status why, bool) {
  if (quiet_) return;
  switch (state()) {
    case core::context_state::starting:
      last_error_ = why;
      ZC_SDK_LOG_ERROR("comch client: connecting to \"{}\" failed: {}", config_.name,
                       status_name(why));
      set_state(core::context_state::idle);
      break;
    case core::context_state::running:
      last_error_ = why;
      ZC_SDK_LOG_WARN("comch client: connection to \"{}\" lost: {}", config_.name,
                      status_name(why));
      set_state(core::context_state::stopping);
      if (inflight() == 0) set_state(core::context_state::idle);
      break;
    default:  // stop() closed it
      if (last_error_ == status::success) last_error_ = status::shutdown;
      break;
  }
}

void client::message_received(connection& c, std::span<const uint8_t> message) {
  if (config_.events.on_message && !quiet_) config_.events.on_message(c, message);
}

void client::consumer_event(connection& c, uint32_t consumer_id, bool created) {
  if (quiet_) return;
  auto& cb = created ? config_.events.on_consumer_new : config_.events.on_consumer_expired;
  if (cb) cb(c, consumer_id);
}

void client::send_finished(send_task& task, status result) noexcept {
  if (!quiet_) complete(task, result);
}

}  // namespace zc::comch
