// The process-wide table of RDMA-exported memory. Engines that serve a peer's read, write or
// atomic call acquire() with what the peer named; they get a pointer only if the export is still
// live and the range and permission fit. A withdrawal waits for acquirers to leave, so memory is
// never touched after its map is withdrawn. Lock-free on the acquire path.
// Thread rules: acquire from any thread; add/remove on the control path.
#pragma once

#include <cstdint>

#include "core/memory_map.hpp"

namespace zc::core {
namespace internal {
struct export_slot;
}

class export_table {
 public:
  // A live claim on part of an exported region; the export cannot be withdrawn while it lives.
  class claim {
   public:
    claim() = default;
    claim(claim&& other) noexcept : slot_(other.slot_), data_(other.data_) {
      other.slot_ = nullptr;
    }
    claim& operator=(claim&& other) noexcept;
    ~claim() { reset(); }
    uint8_t* data() const noexcept { return data_; }
    explicit operator bool() const noexcept { return slot_ != nullptr; }
    void reset() noexcept;

   private:
    friend class export_table;
    internal::export_slot* slot_ = nullptr;
    uint8_t* data_ = nullptr;
  };

  // Checks token, id, range and permission; on success fills `out`. Errors: not_found (no such
  // export or withdrawn), not_permitted (foreign token or permission missing), invalid_value
  // (range outside the region).
  static status acquire(uint64_t owner_token, uint64_t export_id, uint64_t offset, uint64_t length,
                        access needed, claim& out) noexcept;

  // Enters a region; returns its export id (never 0). Throws status_error(full) when full.
  static uint64_t add(uint8_t* data, size_t size, access permissions);
  // Ends an export and waits until no claim on it remains.
  static void remove(uint64_t export_id) noexcept;
};

}  // namespace zc::core
