// zc::comch::client, DOCA's doca_comch_client: the host side of a comch channel. start() dials the
// server of its device's host function by name (see address.hpp), in this user's private socket
// directory (internal/socket_dir.hpp), and talks only to a server of its own user (SO_PEERCRED);
// the client is running once the server has welcomed it, and leaves running (stopping, then idle)
// when the connection goes away, so the context state is the connection state, as in DOCA.
// last_error() says why it left.
//
//   zc::comch::client cli(engine, {.name = "doca_storage_comch"});
//   cli.start();   // throws status_error(not_found) when no server has that name
//   engine.run_until([&] { return cli.state() == core::context_state::running; }, timeout);
//
// Thread rules: the thread of its progress engine only. Destroy it idle.
#pragma once

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comch/connection.hpp"
#include "core/context.hpp"
#include "core/task.hpp"

namespace zc::comch {

namespace internal {
class poller;
}

struct client_config {
  std::string device = "auto";  // the host function this client is on
  std::string name;             // the channel name
  uint32_t max_msg_size = default_max_msg_size;
  uint32_t recv_queue_size = default_recv_queue_size;
  uint32_t send_tasks = default_send_tasks;
  core::task_pool<send_task>::callback on_send_done;
  core::task_pool<send_task>::callback on_send_error;
  channel_events events;
  // How long to keep dialling while no server has the name. Zero: start() fails at once with
  // not_found. Otherwise the client stays starting, retries, and goes idle with last_error()
  // not_found when the time is up.
  std::chrono::milliseconds connect_timeout{0};
};

class client final : public core::context, private internal::connection_owner {
 public:
  // Throws status_error(bad_config) for an empty name or out-of-range sizes.
  client(core::progress_engine& engine, client_config config);
  ~client() override;

  // The connection while running, else nullptr.
  connection* get_connection() const noexcept;
  // A send task for `message`, or nullptr when all send tasks are in flight.
  send_task* allocate_send(std::span<const uint8_t> message) noexcept;
  // Errors: bad_state (not running), not_connected, too_big.
  status submit(send_task& task) noexcept;
  // Why the client last left starting or running: not_found (no such server), not_permitted
  // (refused, or the server runs as another user), connection_reset (the server went away),
  // time_out (no welcome), shutdown (stop()); success while it never left.
  status last_error() const noexcept { return last_error_; }
  const client_config& config() const noexcept { return config_; }

  size_t poll() override;
  int wait_fd() const override;
  bool arm() override;
  core::steady_clock::time_point next_deadline() const override;

 protected:
  core::context_state on_start() override;
  void on_stop() override;

 private:
  // Dials every candidate name once. True when a socket connected (the hello is queued); false
  // when nobody listens yet. Throws status_error for anything final.
  bool dial();
  void fail_start(status why, const std::string& message);
  void connection_established(connection& c) override;
  void connection_closed(connection& c, status why, bool was_established) override;
  void message_received(connection& c, std::span<const uint8_t> message) override;
  void consumer_event(connection& c, uint32_t consumer_id, bool created) override;
  void send_finished(send_task& task, status result) noexcept override;

  client_config config_;
  std::vector<std::string> socket_paths_;  // set by start()
  std::unique_ptr<internal::poller> poller_;
  std::vector<std::unique_ptr<connection>> connection_;  // zero or one live connection
  std::vector<std::unique_ptr<connection>> closed_;
  core::steady_clock::time_point give_up_at_{};
  core::steady_clock::time_point next_dial_{};
  bool dialling_ = false;
  bool quiet_ = false;
  status last_error_ = status::success;
  core::task_pool<send_task> send_pool_;
};

}  // namespace zc::comch
