// The target's control side: waits for a service on TCP and walks it through the sequence of
// REFERENCE_SPEC §2.7/§2.9: query -> init -> create_rdma_connection x (2 x cores) -> start ->
// stop -> shutdown. A message of the wrong type gets an UNEXPECTED error response and leaves the
// stage as it was; shutdown is honoured at any stage; keep_alive_request is answered at any stage
// and changes none; a service that disconnects or goes silent past the keep-alive timeout ends its
// session (workers are torn down) and the target waits for the next one.
// Thread rules: the main thread only.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "storage/control_channel.hpp"
#include "storage/keep_alive.hpp"
#include "target/storage.hpp"
#include "target/worker.hpp"

namespace zc::target {

// How the target serves its sessions (zcstore_target_rdma's flags).
struct service_options {
  std::string device = "auto";
  std::vector<uint32_t> cpus;  // worker i runs on cpus[i]
  core::poll_mode poll_mode = core::poll_mode::adaptive;
  // Goes on after a session that ended with shutdown (--keep-serving); its stats block is
  // printed when each session ends. Without it, a shutdown ends the program, as the reference.
  bool keep_serving = false;
  // A service that sent nothing, not even a keep-alive, for this long has its session ended
  // (--keep-alive-timeout; zero: never).
  std::chrono::milliseconds keep_alive_timeout{
      std::chrono::seconds(storage::default_keep_alive_seconds)};
};

// Largest transaction count a service may ask for, per worker.
inline constexpr uint32_t max_transactions = 65536;

class target_service {
 public:
  target_service(const service_options& config, target_storage& storage, uint32_t block_size);
  ~target_service();

  // Serves sessions until one ends with shutdown_request (without keep_serving) or a stop is
  // requested (Ctrl-C). Returns the exit status: 0, or 1 when the data path of any session had
  // errors.
  int run(storage::control_channel& channel);

 private:
  enum class stage { query, init, connect, start, running, stopped, done };

  void serve(storage::control_channel& channel);
  storage::message handle(const storage::message& request);
  storage::message on_query(const storage::message& request);
  storage::message on_init(const storage::message& request);
  storage::message on_create_connection(const storage::message& request);
  storage::message on_start(const storage::message& request);
  storage::message on_stop(const storage::message& request);
  void stop_workers();
  void teardown();
  // The stats block of the last session's workers (one empty block per --cpu when none ran).
  void print_stats();

  const service_options config_;
  core::device device_;
  target_storage& storage_;
  uint32_t block_size_;
  stage stage_ = stage::query;
  std::unique_ptr<core::memory_map> remote_;
  std::vector<std::unique_ptr<target_worker>> workers_;
  std::vector<worker_stats> stats_;  // the last session's, for the printed blocks
  bool workers_stopped_ = false;     // stats_ and the errors are this session's already
  uint64_t data_path_errors_ = 0;    // every session's
  bool exit_ = false;
};

}  // namespace zc::target
