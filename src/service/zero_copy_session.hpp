// The zero-copy service's handling of a client session (REFERENCE_SPEC §2.7): every request is
// relayed to the one target with the client's correlation id, and the workers (zero_copy_worker)
// are built at init, started at start, stopped at stop and destroyed at shutdown. Every wait is
// bounded by --control-timeout. Thread rules: the control thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "service/client_session.hpp"
#include "service/session_workers.hpp"
#include "service/target_set.hpp"
#include "service/zero_copy_worker.hpp"
#include "storage/stats.hpp"

namespace zc::service {

struct zero_copy_options {
  std::vector<uint32_t> cpus;  // worker i runs on cpus[i]
  core::poll_mode poll_mode = core::poll_mode::adaptive;
  std::chrono::milliseconds control_timeout{5000};
  // --reconnect-timeout: a target lost while the data path runs is dialled again for this long,
  // the host's IOs held meanwhile and relayed again once it is back; 0 ends the session.
  std::chrono::milliseconds reconnect_timeout{0};
};

class zero_copy_session final : public request_handler {
 public:
  // targets: exactly one (the zero-copy pipeline); both must outlive the session.
  zero_copy_session(zero_copy_options options, const core::device& device, target_set& targets,
                    client_link& client);
  ~zero_copy_session() override;

  storage::message on_query(const storage::message& request) override;
  storage::message on_init(const storage::message& request) override;
  storage::message on_start(const storage::message& request) override;
  storage::message on_stop(const storage::message& request) override;
  storage::message on_shutdown(const storage::message& request) override;
  void check_health() override;
  void abort(const std::string& why) noexcept override;

  // One block per worker of the last session (one empty block per --cpu when none ran).
  std::vector<storage::core_stats> stats() const;
  // Data-path errors counted by the workers.
  uint64_t data_path_errors() const noexcept { return workers_.errors(); }
  bool failed() const noexcept { return failed_; }

 private:
  // The target's answer to `type`, or a status_error the loop turns into an error_response.
  storage::message forward(const storage::message& request, storage::message_type type,
                           storage::message_payload payload, storage::message_type expected);
  void stop_workers() noexcept;
  void teardown() noexcept;
  // The data path lost its target (`why`): fences it, then dials it again until it is back with
  // the same storage and every worker relays its held IOs, or throws session_lost past the
  // reconnect timeout (the held IOs are then answered by the teardown, after the fence). A target
  // lost again before it answered an IO since it came back gets no new timeout: the one of the
  // loss it came back from goes on, so a target that accepts every reconnect and serves nothing
  // (a hung data path) cannot hold the host's IOs for ever.
  void reconnect(const std::string& why);
  // IOs the workers answered to the host so far (control thread).
  uint64_t operations();
  // One attempt at the target's init, connections and start for every worker; throws
  // status_error when it failed.
  void rejoin(std::chrono::steady_clock::time_point deadline);

  zero_copy_options options_;
  const core::device& device_;
  target_set& targets_;
  client_link& client_;
  std::unique_ptr<core::memory_map> host_map_;  // the host's IO region, re-exported for rdma
  session_workers<zero_copy_worker, zero_copy_worker_stats> workers_;
  bool failed_ = false;
  uint32_t last_correlation_id_ = 0;
  // The init request's counts and the storage's geometry, for a reconnect.
  uint32_t transactions_ = 0;
  uint32_t core_count_ = 0;
  std::optional<storage::query_storage_response_payload> geometry_;
  // The give-up time of the last reconnect, and operations() when it began: the target has
  // served since it came back once operations() moved on.
  std::optional<std::chrono::steady_clock::time_point> reconnect_deadline_;
  uint64_t operations_at_reconnect_ = 0;
};

}  // namespace zc::service
