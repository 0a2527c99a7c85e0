// zc::core::sync_event, DOCA's doca_sync_event: a 64-bit counter that peers may get, set and add
// to through the rdma layer. It is an 8-byte RDMA-exported memory map with read, write and atomic
// access, so it shares the export table's lifetime and permission checks. The counter lives in
// memory the map owns, so a peer's operation still in progress when the event is destroyed
// finishes on valid memory.
// Thread rules: value() and the local operations are safe from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/memory_map.hpp"

namespace zc::core {

class sync_event {
 public:
  explicit sync_event(uint64_t initial = 0);

  uint64_t value() const noexcept { return std::atomic_ref<uint64_t>(*counter_).load(); }
  void set(uint64_t v) noexcept { std::atomic_ref<uint64_t>(*counter_).store(v); }
  uint64_t add(uint64_t v) noexcept { return std::atomic_ref<uint64_t>(*counter_).fetch_add(v); }

  // Blob for a peer's remote get/set/add tasks (import it with memory_map::import_rdma).
  std::vector<uint8_t> export_remote() { return map_->export_rdma(); }
  memory_map& map() noexcept { return *map_; }

 private:
  std::unique_ptr<memory_map> map_;
  uint64_t* counter_;  // in map_'s memory
};

}  // namespace zc::core
