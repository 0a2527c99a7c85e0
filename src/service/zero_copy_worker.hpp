// One worker of the zero-copy service (REFERENCE_SPEC §3.6): a thread pinned to its core, with
// its progress engine, a comch consumer (requests from the host) and producer (answers to the
// host) on the client's comch connection, and two rdma contexts to target worker i: io_control
// (IO messages out, responses in) and io_data (no tasks: the target reads and writes the host
// pages through it). A request is relayed byte for byte in the buffer it arrived in; the
// target's answer goes back to the host with its result unchanged.
// Thread rules: the public methods are for the control thread; they run their work on the
// worker's thread and wait for it with a bound. Everything attached to the worker's engine is
// built, used and destroyed on that thread only, even when a wait gives up.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "comch/connection.hpp"
#include "core/device.hpp"
#include "service/worker_host.hpp"
#include "storage/control_message.hpp"

namespace zc::service {

// Most IO messages in flight per worker (the target's own limit on its transaction count).
inline constexpr uint32_t max_worker_transactions = 65536;

struct zero_copy_worker_stats {
  uint32_t cpu = 0;
  uint64_t operations = 0;  // responses sent to the host (error answers included)
  uint64_t errors = 0;      // refused messages, failed relays and sends
  uint64_t pe_hits = 0;
  uint64_t pe_misses = 0;
};

using zero_copy_worker_limits = worker_limits;

class zero_copy_worker {
  class io_path;  // the engine-thread half, private

 public:
  // conn: the client's comch connection; transactions: N (1..max_worker_transactions). Builds
  // and starts the comch consumer before returning, so its id is assigned (the pairing rule of
  // storage/peer_consumers.hpp) and the rdma contexts, ready to connect. The device must outlive
  // the worker. With hold_on_loss (--reconnect-timeout), the IOs of a lost target and those the
  // host sends after the loss are held for resume() instead of answered failed. Throws
  // status_error.
  zero_copy_worker(uint32_t cpu, core::poll_mode mode, const core::device& device,
                   comch::connection& conn, uint32_t transactions,
                   zero_copy_worker_limits limits = {}, bool hold_on_loss = false);
  // Stops what runs (bounded) and destroys it on the worker thread, then joins it.
  ~zero_copy_worker();
  zero_copy_worker(const zero_copy_worker&) = delete;
  zero_copy_worker& operator=(const zero_copy_worker&) = delete;

  uint32_t cpu() const noexcept { return cpu_; }
  // This worker's comch consumer, as the host sees it announced.
  uint32_t consumer_id() const noexcept { return consumer_id_; }

  // This side's connection blob for `role` (send it to the target worker).
  std::vector<uint8_t> export_connection(storage::rdma_role role);
  // Connects `role` to the target's blob. Throws status_error.
  void connect(storage::rdma_role role, std::span<const uint8_t> peer_blob);
  // The comch producer and consumer and both rdma contexts run.
  bool ready();
  // Posts every receive and serves IOs; answers go to the host consumer `host_consumer_id`.
  void start_data_path(uint32_t host_consumer_id);
  // The bounded stop steps (drain, fence, answer what the target never answered), which
  // session_workers takes on every worker at once. A connection failure after the drain began is
  // no error of the session (the target stops its side at stop_storage).
  worker_host<io_path>& steps() noexcept { return host_; }
  // Stops and destroys the comch producer and consumer (the host sees the consumer expire).
  void close_comch();
  zero_copy_worker_stats stats();
  // One of its rdma connections left running while IOs were served (the target or the link
  // failed): IOs already relayed will get no answer. Any thread.
  bool rdma_lost() const noexcept;
  // Reconnect: the worker holds its IOs from now on and stops its rdma contexts (as when it lost
  // the target itself); fence with steps() after.
  void hold();
  // Reconnect, once fenced (steps().wait_fenced): new rdma contexts, to be exported and connected
  // as at init. Throws status_error.
  void rearm();
  // Once the new contexts run: relays again every IO held since the loss; returns how many.
  uint32_t resume();

 private:
  uint32_t cpu_;
  uint32_t consumer_id_ = 0;
  worker_host<io_path> host_;
};

// Instantiated in the .cpp, where io_path is complete.
extern template class worker_host<zero_copy_worker::io_path>;

}  // namespace zc::service
