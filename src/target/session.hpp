// The target's control side. target_service listens for services on TCP and gives each one its
// own target_session on its own thread, up to --max-sessions at once (multi-attach: every session
// sees the whole storage, as hosts share a SAN LUN; writes of two sessions to one block are not
// ordered against each other). A service that arrives while every slot is taken waits a moment
// for one (a session that is ending frees its slot), and is otherwise answered, on its first
// request, with an in_use error that says so, and closed.
// A session walks its service through the sequence of REFERENCE_SPEC §2.7/§2.9: query -> init ->
// create_rdma_connection x (2 x cores) -> start -> stop -> shutdown. A message of the wrong type
// gets an UNEXPECTED error response and leaves the stage as it was; shutdown is honoured at any
// stage; keep_alive_request is answered at any stage and changes none; a service that
// disconnects or goes silent past the keep-alive timeout ends its own session (its workers are
// torn down) and no other.
// Thread rules: target_service on the main thread; each target_session on its own thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/device.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "storage/control_channel.hpp"
#include "storage/keep_alive.hpp"
#include "storage/tcp_control_channel.hpp"
#include "storage/unique_fd.hpp"
#include "target/storage.hpp"
#include "target/worker.hpp"

namespace zc::target {

// How the target serves its sessions (zcstore_target_rdma's flags).
struct service_options {
  std::string device = "auto";
  std::vector<uint32_t> cpus;  // worker i of every session runs on cpus[i]
  core::poll_mode poll_mode = core::poll_mode::adaptive;
  // Goes on after a session that ended with shutdown (--keep-serving); its stats block is
  // printed when each session ends. Without it, a shutdown ends the program, as the reference.
  bool keep_serving = false;
  // Services served at once (--max-sessions); above 1 only with keep_serving, since without it
  // one service's shutdown would end every other's session.
  uint32_t max_sessions = 1;
  // A service that sent nothing, not even a keep-alive, for this long has its session ended
  // (--keep-alive-timeout; zero: never).
  std::chrono::milliseconds keep_alive_timeout{
      std::chrono::seconds(storage::default_keep_alive_seconds)};
};

// Largest transaction count a service may ask for, per worker.
inline constexpr uint32_t max_transactions = 65536;
// Most sessions a target serves at once (each has a thread per --cpu).
inline constexpr uint32_t max_sessions_limit = 64;

// One service's session, on one connected control channel.
class target_session {
 public:
  enum class outcome {
    shutdown,  // the service asked for it (shutdown_request)
    ended,     // the service left, went silent or could not be answered
    stopped,   // Ctrl-C
  };

  // `number` names the session in its log lines.
  target_session(const service_options& config, const core::device& device, target_storage& storage,
                 uint32_t block_size, uint64_t number);
  ~target_session();
  target_session(const target_session&) = delete;
  target_session& operator=(const target_session&) = delete;

  // Serves `channel` until the session ends; its workers are torn down by then.
  outcome serve(storage::control_channel& channel);
  // Its workers' stats, once they stopped (empty when none ran).
  const std::vector<worker_stats>& stats() const noexcept { return stats_; }
  // The errors of its data path.
  uint64_t data_path_errors() const noexcept { return data_path_errors_; }

 private:
  enum class stage { query, init, connect, start, running, stopped, done };

  outcome run(storage::control_channel& channel);
  storage::message handle(const storage::message& request);
  storage::message on_query(const storage::message& request);
  storage::message on_init(const storage::message& request);
  storage::message on_create_connection(const storage::message& request);
  storage::message on_start(const storage::message& request);
  storage::message on_stop(const storage::message& request);
  void stop_workers();
  void teardown();

  const service_options& config_;
  const core::device& device_;
  target_storage& storage_;
  uint32_t block_size_;
  uint64_t number_;
  stage stage_ = stage::query;
  std::unique_ptr<core::memory_map> remote_;
  std::vector<std::unique_ptr<target_worker>> workers_;
  std::vector<worker_stats> stats_;
  bool workers_stopped_ = false;  // stats_ and the errors are these workers' already
  uint64_t data_path_errors_ = 0;
};

class target_service {
 public:
  target_service(const service_options& config, target_storage& storage, uint32_t block_size);
  ~target_service();

  // Serves services from `listener` until one session ends with shutdown (without
  // keep_serving) or a stop is requested (Ctrl-C); then every session ends. Returns the exit
  // status: 0, or 1 when the data path of any session had errors.
  int run(storage::tcp_listener& listener);

 private:
  // A connection and the thread that serves it: a session, or the answer that there is no room.
  struct connection {
    std::unique_ptr<storage::tcp_accepted_channel> channel;
    std::string peer;
    std::thread thread;
    // Written by the thread before it ends (`done` last).
    uint64_t number = 0;  // the session's, from 1 in order of connection; 0: never one
    std::optional<target_session::outcome> outcome;
    std::vector<worker_stats> stats;
    uint64_t errors = 0;
    std::atomic<bool> done{false};
  };

  void admit(std::unique_ptr<storage::tcp_accepted_channel> channel);
  // The connection's thread: the TLS handshake, a slot (waiting a moment for one), then the
  // session or the refusal. `slotless_` counts it until it has a slot or is done.
  void attend(connection& c);
  void serve(connection& c);
  void refuse(connection& c);
  // A free slot within `wait`, taken (false without one, on Ctrl-C, or once closing).
  bool take_slot(std::chrono::milliseconds wait);
  size_t slotless();
  // Joins the connections whose thread ended (every one with `wait_all`); logs and prints each
  // session's end.
  void reap(bool wait_all);
  void print_stats(const std::vector<worker_stats>& stats);

  const service_options config_;
  core::device device_;
  target_storage& storage_;
  uint32_t block_size_;
  storage::unique_fd ended_;  // an eventfd: a connection's thread ended
  std::list<connection> connections_;
  std::mutex slots_mutex_;
  std::condition_variable slot_freed_;
  uint32_t free_slots_;   // --max-sessions less the sessions running
  size_t slotless_ = 0;   // connections in their TLS handshake, waiting for a slot or refused
  bool closing_ = false;  // a shutdown ends the program: no slot is given any more
  std::atomic<uint64_t> sessions_connected_{0};
  uint64_t sessions_ended_ = 0;           // with keep_serving
  std::vector<worker_stats> last_stats_;  // printed at exit without keep_serving
  uint64_t data_path_errors_ = 0;         // every session's
  bool exit_ = false;
};

}  // namespace zc::target
