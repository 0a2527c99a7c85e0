// One target worker: a thread pinned to its core, with its progress engine and the two rdma
// contexts of one service worker (io_control: IO messages in and responses out; io_data: the
// reads and writes against the requester's memory). Each IO is a small state machine on a
// transaction slot: receive -> check -> transfer -> respond -> receive again.
// Thread rules: the public methods are for the control thread; they run their work on the
// worker's own thread and wait for it with a bound.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/buffer.hpp"
#include "core/device.hpp"
#include "core/engine_thread.hpp"
#include "core/memory_map.hpp"
#include "rdma/context.hpp"
#include "storage/control_message.hpp"

namespace zc::target {

struct worker_stats {
  uint32_t cpu = 0;
  uint64_t operations = 0;  // transfers that completed
  uint64_t errors = 0;      // failed transfers, refused IOs, failed sends
  uint64_t pe_hits = 0;
  uint64_t pe_misses = 0;
};

class target_worker {
 public:
  // storage: the target's memory; remote: the requester's RDMA export; transactions: N.
  target_worker(uint32_t cpu, core::poll_mode mode, const core::device& device,
                core::memory_map& storage, core::memory_map& remote, uint32_t transactions);
  ~target_worker();

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
  struct slot;
  void on_request(slot& s);
  void on_transfer_done(slot& s, status result);
  void respond(slot& s, status result);
  void answered(slot& s);
  void post_receive(slot& s);

  uint32_t cpu_;
  core::memory_map& storage_;
  core::memory_map& remote_;
  uint32_t transactions_;
  core::engine_thread thread_;
  // Engine-thread state below.
  std::unique_ptr<core::memory_map> messages_map_;
  std::vector<uint8_t> messages_;
  std::unique_ptr<core::buffer_inventory> inventory_;
  std::unique_ptr<rdma::context> control_;
  std::unique_ptr<rdma::context> data_;
  std::vector<slot> slots_;
  int connected_roles_ = 0;
  bool serving_ = false;
  uint32_t in_flight_ = 0;  // requests received and not yet answered
  uint64_t operations_ = 0;
  uint64_t errors_ = 0;
};

}  // namespace zc::target
