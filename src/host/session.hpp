// The host side of a storage session (REFERENCE_SPEC §2.7 from the initiator's seat): the comch
// control channel to a service, the query -> init -> start -> stop -> shutdown requests with the
// ids of §2.5 and a deadline on every wait, the IO region the service and its targets reach
// (page aligned, PCI-exported), and one worker per core paired with the service's consumers by
// the pairing rule (docs/ARCHITECTURE.md), not by the order their events arrive in.
//
//   host::session s({.channel_name = "storage", .control_timeout = 5s});
//   auto info = s.query();
//   s.init(region_size, transactions, cpus.size());
//   for (auto cpu : cpus) s.add_worker(cpu, {.slots = t, .on_complete = done});
//   s.wait_ready();  s.start();  ...IO on the workers' threads...  s.stop();  s.shutdown();
//
// Thread rules: a session belongs to the thread that made it (the control thread); each worker's
// io_queue belongs to that worker's thread (see worker.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "host/worker.hpp"
#include "storage/comch_control_channel.hpp"
#include "storage/control_message.hpp"
#include "storage/keep_alive.hpp"
#include "storage/peer_consumers.hpp"

namespace zc::host {

struct session_options {
  std::string device = "auto";
  std::string channel_name = "doca_storage_comch";
  // Bounds the connect, every response wait and the readiness wait.
  std::chrono::milliseconds control_timeout{5000};
  // watch() sends keep-alives and counts the service lost when it answered none for this long;
  // zero: none sent (a reference service knows no keep-alive).
  std::chrono::milliseconds keep_alive_timeout{std::chrono::seconds(10)};
  core::poll_mode poll_mode = core::poll_mode::adaptive;
};

struct storage_info {
  uint64_t capacity = 0;  // bytes
  uint32_t block_size = 0;
};

class session {
 public:
  // Connects to the service, dialling again while none has the channel name yet. Throws
  // status_error: time_out "Timed out trying to connect to storage", or the channel's failure.
  explicit session(const session_options& options);
  // Stops the workers and closes the channel (the service then sees its client leave).
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  // Each request below throws status_error: the service's error code with "<request> id: <mid>
  // failed!: <text>", unexpected for an answer of another type, time_out past the control
  // timeout, or the channel's failure.
  storage_info query();
  // Allocates the IO region (region_size rounded up to whole pages, zeroed, exported for PCI with
  // read-write and RDMA rights, as the service re-exports it to its targets) and sends
  // init_storage_request{transaction_count, core_count, export}.
  void init(uint64_t region_size, uint32_t transaction_count, uint32_t core_count);
  core::memory_map& region() const noexcept { return *region_; }

  // Builds the next worker (index = workers built so far) on its own thread pinned to `cpu`.
  worker& add_worker(uint32_t cpu, queue_options options);
  std::vector<std::unique_ptr<worker>>& workers() noexcept { return workers_; }

  // Waits, within the control timeout, until the service announced one consumer per worker and
  // every worker's endpoints run, then pairs worker i with the service's i-th smallest consumer
  // id. Any control message arriving meanwhile is an error (bad_state).
  void wait_ready();
  void start();

  // While the data path runs: sends a keep-alive when one is due, sleeps on the channel up to
  // `slice`; success while the service is there, otherwise why the session is over (the channel
  // failed, the service sent something unrequested: unexpected, or it answered no keep-alive for
  // longer than the keep-alive timeout: time_out).
  status watch(std::chrono::milliseconds slice);
  // The first worker whose queue stopped working — it gave up on a silent service (time_out), or
  // its consumer failed — with that worker; success (and null) while every queue works. A queue
  // that gave up still holds the IOs the service has: the session is over, and the program ends
  // it rather than reuse their memory.
  std::pair<status, worker*> queue_failure();

  // Both go on after Ctrl-C (bounded): they are how Ctrl-C ends a run cleanly.
  void stop();
  // Stops the workers' endpoints, sends shutdown_request, then waits (bounded) until the
  // service's consumers have expired.
  void shutdown();

  const storage::peer_consumers& service_consumers() const noexcept { return service_consumers_; }

 private:
  storage::message request(storage::message_type type, storage::message_type expected,
                           storage::message_payload payload, std::chrono::milliseconds timeout,
                           storage::on_stop_request policy = storage::on_stop_request::give_up);
  void take_consumer_events();

  session_options options_;
  std::unique_ptr<storage::comch_control_client> channel_;
  storage::keep_alive alive_;
  uint32_t next_id_ = 0;  // message_id and correlation_id of the next request (§2.5)
  std::unique_ptr<core::memory_map> region_;
  storage::peer_consumers service_consumers_;  // announced and not expired
  std::vector<std::unique_ptr<worker>> workers_;
};

}  // namespace zc::host
