// zc::comch::server, DOCA's doca_comch_server: the service ("DPU") side of a comch channel. It
// listens on the channel's socket file for its host function (see address.hpp) in this user's
// private socket directory (internal/socket_dir.hpp), accepts several clients at once, only from
// the same user (SO_PEERCRED; anyone else is refused and logged), and raises connect,
// disconnect, message and consumer events inside progress(). The socket file stays when the
// server stops (a later start, of this server or another, replaces it as stale) and is removed
// when the server is destroyed.
//
//   zc::comch::server srv(engine, {.name = "doca_storage_comch", .on_connect = ...});
//   srv.start();                      // throws status_error(in_use) if the name is served
//   while (...) engine.progress();
//
// Thread rules: the thread of its progress engine only. Destroy it idle (stop, then progress
// until state() is idle), as every context.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comch/connection.hpp"
#include "comch/internal/socket_dir.hpp"
#include "core/context.hpp"
#include "core/task.hpp"

namespace zc::comch {

// Peers a server lets be in their hello/welcome exchange at once; more wait in the backlog.
inline constexpr size_t max_handshakes = 64;
// How long a server's listener rests after accept failed (out of descriptors or memory).
inline constexpr std::chrono::milliseconds accept_backoff{100};

namespace internal {
class poller;
}

struct server_config {
  std::string device = "auto";  // the service side's device: a label here
  std::string representor;      // the host function served; empty = "auto"
  std::string name;             // the channel name (--command-channel-name)
  // Largest control message this end sends or accepts; a bigger incoming frame drops the
  // connection.
  uint32_t max_msg_size = default_max_msg_size;
  // Control messages handled per connection per progress() call.
  uint32_t recv_queue_size = default_recv_queue_size;
  uint32_t send_tasks = default_send_tasks;
  core::task_pool<send_task>::callback on_send_done;
  core::task_pool<send_task>::callback on_send_error;
  channel_events events;
  std::function<void(connection&)> on_connect;
  // The connection is gone; it stays valid until this callback returns.
  std::function<void(connection&)> on_disconnect;
};

class server final : public core::context, private internal::connection_owner {
 public:
  // Throws status_error(bad_config) for an empty name or out-of-range sizes.
  server(core::progress_engine& engine, server_config config);
  ~server() override;

  // A send task for `message` to `to`, or nullptr when all send tasks are in flight.
  send_task* allocate_send(connection& to, std::span<const uint8_t> message) noexcept;
  // Errors: bad_state (not running), not_connected, too_big (over the connection's
  // max_send_size()). On success the task completes through a callback.
  status submit(send_task& task) noexcept;
  // Closes a client's connection; its consumer-expired and disconnect events run inside.
  void disconnect(connection& c);

  size_t connection_count() const noexcept;
  // Peers refused so far (another user, or a protocol version we do not speak).
  uint64_t refused_peers() const noexcept { return refused_peers_; }
  // The socket file the server listens on; set by start() (empty before the first).
  const std::string& socket_path() const noexcept { return socket_path_; }
  const server_config& config() const noexcept { return config_; }

  size_t poll() override;
  int wait_fd() const override;
  bool arm() override;
  core::steady_clock::time_point next_deadline() const override;

 protected:
  core::context_state on_start() override;
  // Closes the listener and every connection (their disconnect events run inside stop()).
  void on_stop() override;

 private:
  void connection_established(connection& c) override;
  void connection_closed(connection& c, status why, bool was_established) override;
  void message_received(connection& c, std::span<const uint8_t> message) override;
  void consumer_event(connection& c, uint32_t consumer_id, bool created) override;
  void send_finished(send_task& task, status result) noexcept override;
  size_t accept_all();
  // Connections still in their hello/welcome exchange.
  size_t handshakes() const noexcept;
  // Takes the listener out of the poll set (or puts it back). While out, new peers wait in the
  // socket's backlog: at max_handshakes, or for accept_backoff after accept failed.
  void pause_accepting(bool paused) noexcept;

  server_config config_;
  std::string socket_directory_;
  std::string socket_path_;
  internal::socket_file_id socket_file_;
  bool made_socket_file_ = false;
  std::unique_ptr<internal::poller> poller_;
  int listener_ = -1;
  bool accept_paused_ = false;
  core::steady_clock::time_point accept_resumes_at_{};  // after a failed accept
  std::vector<std::unique_ptr<connection>> connections_;
  std::vector<std::unique_ptr<connection>> closed_;  // freed once no send task is in flight
  uint64_t next_connection_id_ = 1;
  uint64_t refused_peers_ = 0;
  bool quiet_ = false;  // destructor: no user callbacks, no completions
  core::task_pool<send_task> send_pool_;
};

}  // namespace zc::comch
