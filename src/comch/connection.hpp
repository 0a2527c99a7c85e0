// zc::comch::connection, DOCA's doca_comch_connection: one established client<->server channel.
// It carries control messages (send tasks, receive events) and is what producers and consumers
// are created on. A server has one per connected client; a client has exactly one.
// Thread rules: owned by the thread of its server's or client's progress engine; producers and
// consumers on other threads may be created on it while it is connected.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/context.hpp"
#include "core/task.hpp"

namespace zc::comch {

class connection;
class server;
class client;
class consumer;
class producer;

// Defaults and limits of the control path.
inline constexpr uint32_t default_max_msg_size = 4080;  // DOCA's default on BlueField
inline constexpr uint32_t max_msg_size_limit = 16u << 20;
inline constexpr uint32_t default_recv_queue_size = 64;
// The reference keeps 8 control messages in flight (max_concurrent_control_messages).
inline constexpr uint32_t default_send_tasks = 8;
// How long a freshly connected peer has to complete the hello/welcome exchange.
inline constexpr std::chrono::milliseconds handshake_timeout{5000};
// Consumers a peer may have announced on one connection at a time. Each holds two descriptors and
// a queue mapping in this process: without a bound, a peer could exhaust both. Announcements
// beyond it are refused (logged; producers sending to them get not_found).
inline constexpr uint32_t max_peer_consumers = 256;

// A control message to the peer of a connection. The message bytes are the caller's: they must
// stay untouched until the task completes, which happens once all of them are in the socket.
class send_task final : public core::task_base {
 public:
  connection& target() const noexcept { return *connection_; }
  std::span<const uint8_t> message() const noexcept { return message_; }
  // For re-submission of a completed task.
  void set_message(std::span<const uint8_t> message) noexcept { message_ = message; }

 private:
  friend class server;
  friend class client;
  friend class connection;
  connection* connection_ = nullptr;
  std::span<const uint8_t> message_;
};

// The events a server or client raises, all inside progress() of its engine.
struct channel_events {
  // A control message arrived; `message` is valid only inside the callback.
  std::function<void(connection&, std::span<const uint8_t> message)> on_message;
  // The peer started a consumer: producers on this connection may now send to `consumer_id`.
  std::function<void(connection&, uint32_t consumer_id)> on_consumer_new;
  // The peer's consumer stopped, or the connection went away.
  std::function<void(connection&, uint32_t consumer_id)> on_consumer_expired;
};

namespace internal {
class link;
class poller;
struct outbox_frame;
struct peer_credentials;

// What a connection tells the server or client that owns it.
class connection_owner {
 public:
  virtual void connection_established(connection& c) = 0;
  // After the consumer-expired events; `was_established` is false for a failed handshake.
  virtual void connection_closed(connection& c, status why, bool was_established) = 0;
  virtual void message_received(connection& c, std::span<const uint8_t> message) = 0;
  virtual void consumer_event(connection& c, uint32_t consumer_id, bool created) = 0;
  virtual void send_finished(send_task& task, status result) noexcept = 0;

 protected:
  ~connection_owner() = default;
};
}  // namespace internal

class connection {
 public:
  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  // Unique among the connections of one server.
  uint64_t id() const noexcept { return id_; }
  // The peer process, as the kernel saw it when it connected (SO_PEERCRED).
  pid_t peer_pid() const noexcept { return peer_pid_; }
  uid_t peer_uid() const noexcept { return peer_uid_; }
  // Established and not yet closed. Any thread may ask (the owner's thread changes it).
  bool connected() const noexcept { return phase_ == phase::established; }
  // Keeps this object (not the connection: it still closes) after it closed, until every pin is
  // released: for an owner that hands the connection to another thread, which may be creating a
  // producer or consumer on it (they fail with not_connected once it closed) when it goes away.
  // Any thread.
  void pin() noexcept { pins_.fetch_add(1, std::memory_order_relaxed); }
  void unpin() noexcept { pins_.fetch_sub(1, std::memory_order_release); }
  bool pinned() const noexcept { return pins_.load(std::memory_order_acquire) != 0; }
  // Largest control message a send may carry: the smaller of both ends' max_msg_size.
  uint32_t max_send_size() const noexcept { return std::min(max_msg_size_, peer_max_msg_size_); }
  core::context& owner() const noexcept { return context_; }
  void set_user_data(core::user_data d) noexcept { user_data_ = d; }
  core::user_data get_user_data() const noexcept { return user_data_; }

 private:
  friend class server;
  friend class client;
  friend class consumer;
  friend class producer;
  friend class internal::poller;
  enum class phase { handshake, established, closed };
  struct outgoing {
    send_task* task = nullptr;   // a user message (bytes in the task) ...
    std::vector<uint8_t> frame;  // ... or an internal frame, header included
    uint8_t header[8] = {};
    std::vector<int> fds;  // passed with the first byte; owned until sent
    size_t sent = 0;
    size_t total() const noexcept;
  };

  connection(internal::connection_owner& owner, core::context& context, int fd, bool client_side,
             uint64_t id, const internal::peer_credentials& peer, uint32_t max_msg_size,
             uint32_t recv_queue_size, int mailbox);

  int fd() const noexcept { return fd_; }
  // Removes the socket from the owner's poll set, then closes it. A copy of the socket (a child
  // forked before exec holds one) would otherwise keep it registered, reporting events for a
  // connection that no longer exists.
  void close_socket() noexcept;
  // Grows the receive buffer to what the peer may send in its phase; false (and closed) when
  // there is no memory for it.
  bool reserve_receive_buffer() noexcept;
  // Payload limit of a user message from the peer in the current phase.
  uint32_t message_limit() const noexcept;
  bool closed() const noexcept { return phase_ == phase::closed; }
  const std::shared_ptr<internal::link>& link() const noexcept { return link_; }
  // Reads what the socket holds and handles complete frames, at most recv_queue_size messages
  // per call. Returns the number of frames handled.
  size_t receive();
  // A complete frame is buffered (the last receive() stopped at the message budget).
  bool has_backlog() const noexcept;
  // Writes queued frames; returns how many went out completely.
  size_t flush();
  bool wants_write() const noexcept { return !out_.empty() && phase_ != phase::closed && !broken_; }
  // A write failed: the owner closes the connection in its next poll.
  bool broken() const noexcept { return broken_ && phase_ != phase::closed; }
  // Queues a user message (the task's bytes) and tries to write it at once.
  void queue_message(send_task& task);
  void queue_frame(internal::outbox_frame&& frame);
  // Queues what fast-path endpoints posted to the link.
  void drain_outbox();
  void send_hello();
  // Sends a refusal as the last frame, best effort, then closes.
  void refuse(status why, std::string_view reason);
  // Idempotent. Fails queued sends with `why`, closes the link (expiring the peer's consumers),
  // then tells the owner.
  void close(status why);

  void handle_frame(uint16_t type, std::span<const uint8_t> payload, std::vector<int>& fds);
  void handle_consumer_new(std::span<const uint8_t> payload, std::vector<int>& fds);
  void protocol_error(const std::string& what);

  internal::connection_owner& owner_;
  core::context& context_;
  int fd_ = -1;
  int poll_set_ = -1;  // the owner's epoll set watching fd_
  bool client_side_ = false;
  std::atomic<phase> phase_{phase::handshake};
  std::atomic<uint32_t> pins_{0};
  uint64_t id_ = 0;
  pid_t peer_pid_ = 0;
  uid_t peer_uid_ = 0;
  uint32_t max_msg_size_ = default_max_msg_size;
  uint32_t peer_max_msg_size_ = default_max_msg_size;
  uint32_t recv_queue_size_ = default_recv_queue_size;
  core::user_data user_data_{.u64 = 0};
  std::shared_ptr<internal::link> link_;
  std::chrono::steady_clock::time_point handshake_deadline_;
  bool write_armed_ = false;  // the owner watches the socket for EPOLLOUT
  bool broken_ = false;
  uint64_t served_round_ = 0;  // the owner's poll round that last read this connection
  status refusal_ = status::success;

  std::vector<uint8_t> in_;
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  std::vector<int> in_fds_;
  std::deque<outgoing> out_;
};

}  // namespace zc::comch
