// One target worker: a thread pinned to its core, with its progress engine and the two rdma
// contexts of one service worker (io_control: IO messages in and responses out; io_data: the
// reads and writes against the requester's memory). Each IO is a small state machine on a
// transaction slot: receive -> check -> transfer -> respond -> receive again. A flush skips the
// transfer: the worker's flusher thread syncs the storage, and the worker responds. A discard or
// write zeroes (DESIGN §2 types 4, 5) moves no data either: the flusher thread deallocates the
// range and the worker responds. An allocation map (type 6) is computed by the flusher thread
// into the slot's bitmap, which the worker then rdma-writes to the requester.
// Thread rules: the public methods are for the control thread; they run their work on the
// worker's own thread and wait for it with a bound. Everything attached to the worker's engine
// is built, used and destroyed on that thread only, even when a wait gives up.
// A worker also has a flusher thread (target_flusher), which only does those storage calls and
// posts the results to the worker's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/device.hpp"
#include "core/engine_owned.hpp"
#include "core/engine_thread.hpp"
#include "core/memory_map.hpp"
#include "storage/control_message.hpp"
#include "target/storage.hpp"

namespace zc::target {

struct worker_stats {
  uint32_t cpu = 0;
  uint64_t operations = 0;  // reads and writes that completed (no other type counts)
  uint64_t errors = 0;      // failed transfers and flushes, refused IOs and messages, failed sends
  uint64_t pe_hits = 0;
  uint64_t pe_misses = 0;
  uint64_t refused_messages = 0;  // messages that did not fit a receive slot (among the errors)
  // The IOs of each type answered SUCCESS, and the bytes the reads and writes moved.
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t read_bytes = 0;
  uint64_t written_bytes = 0;
  uint64_t discards = 0;
  uint64_t write_zeroes = 0;
  uint64_t allocation_maps = 0;
};

// How long the control thread waits for a worker.
struct worker_limits {
  std::chrono::milliseconds command{10000};  // building the worker, connecting, each command
  std::chrono::milliseconds drain{5000};     // at stop: IOs in flight, then the contexts
};

class target_worker {
 public:
  // storage: the target's blocks; remote: the requester's RDMA export; transactions: N. Both
  // and the device must outlive the worker. Throws status_error (time_out when the worker
  // thread did not build its contexts within limits.command).
  target_worker(uint32_t cpu, core::poll_mode mode, const core::device& device,
                target_storage& storage, core::memory_map& remote, uint32_t transactions,
                worker_limits limits = {});
  // Hands the engine-thread half to the worker thread for destruction and joins it.
  ~target_worker();
  target_worker(const target_worker&) = delete;
  target_worker& operator=(const target_worker&) = delete;

  // Creates the context for `role`, connects it to the peer's blob, returns this side's blob.
  // Throws status_error (already_exist for a role connected twice, or the rdma layer's error).
  std::vector<uint8_t> connect(storage::rdma_role role, std::span<const uint8_t> peer_blob);
  bool connected() const noexcept { return connected_roles_ == 2; }
  // Both contexts running (the peer connected its side too).
  bool ready();
  // Posts every receive: IOs are served from now on.
  void start_data_path();
  // Stops taking IOs, lets those in flight finish (bounded), stops both contexts.
  void stop();
  worker_stats stats();

 private:
  class io_path;  // the engine-thread half: contexts, slots, counters

  uint32_t cpu_;
  worker_limits limits_;
  int connected_roles_ = 0;
  core::engine_thread thread_;
  // Declared after thread_: destroyed first, by a job on thread_, which thread_'s join waits for.
  core::engine_owned<io_path> io_;
};

}  // namespace zc::target
