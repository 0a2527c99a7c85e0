// The process-wide table of RDMA-exported memory. Engines that serve a peer's read, write or
// atomic call acquire() with what the peer named; they get a pointer only if the export is still
// live, the key is the export's own and the range and permission fit.
//
// Lifetime: remove() withdraws an export at once (every later acquire fails with not_found) and
// never waits. The slot stays reserved ("draining") until the last claim on the export is
// released; then the export's release action runs, exactly once, on the thread that dropped that
// claim (or inside remove() when no claim was live), and only then may the slot be reused. So a
// claim can never outlive the memory it points into, as long as that memory is freed by the
// release action (memory_map does this for the memory it owns).
//
// Isolation: each export has its own random 64-bit key, carried only by its export blob; an
// acquire must name it. Export ids are not secret.
//
// Thread rules: acquire and claim release from any thread, lock-free; add/remove on the control
// path (serialised by a mutex).
#pragma once

#include <cstdint>
#include <functional>

#include "core/memory_map.hpp"

namespace zc::core {
namespace internal {
struct export_slot;
}

class export_table {
 public:
  // A live claim on part of an exported region: the region's memory stays valid (its release
  // action waits) until the claim is reset or destroyed, even if the export is withdrawn.
  class claim {
   public:
    claim() = default;
    claim(claim&& other) noexcept : slot_(other.slot_), data_(other.data_) {
      other.slot_ = nullptr;
      other.data_ = nullptr;
    }
    claim& operator=(claim&& other) noexcept;
    ~claim() { reset(); }
    uint8_t* data() const noexcept { return data_; }
    explicit operator bool() const noexcept { return slot_ != nullptr; }
    // Drops the claim; if it was the last one on a withdrawn export, runs its release action.
    void reset() noexcept;

   private:
    friend class export_table;
    internal::export_slot* slot_ = nullptr;
    uint8_t* data_ = nullptr;
  };

  struct entry {
    uint64_t id;   // slot + generation; never 0; not secret
    uint64_t key;  // random, never 0; whoever may access the export must name it
  };

  // Enters a region under a fresh random key. `release` runs exactly once, when the export has
  // been withdrawn and its last claim released: inside remove() when no claim is live, else
  // inside the claim::reset() (or claim destructor) that drops the last claim, on that thread.
  // It must not throw. Throws status_error(full) when every slot is live or draining (release is
  // then dropped without running), status_error(operating_system) if no random key can be had.
  static entry add(uint8_t* data, size_t size, access permissions,
                   std::function<void()> release = {});

  // Checks id, key, range and permission; on success fills `out`. Errors: not_found (no such
  // live export: unknown, withdrawn or draining), not_permitted (wrong key, or permission
  // missing), invalid_value (range outside the region). A failed acquire resets `out`.
  static status acquire(uint64_t export_id, uint64_t key, uint64_t offset, uint64_t length,
                        access needed, claim& out) noexcept;

  // Withdraws an export now and returns without waiting for its claims (see Lifetime above).
  // Unknown, stale or already withdrawn ids are ignored.
  static void remove(uint64_t export_id) noexcept;
};

}  // namespace zc::core
