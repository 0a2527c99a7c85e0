// The gga service's arithmetic (REFERENCE_SPEC §2.8, §3.2, §6.1): the doubled geometry it reports
// to the host, the per-transaction chunk in its own memory, and a host IO turned into k blocks of
// two halves on the targets. Every value that comes from a peer (host IO message, target answer)
// is checked here before it is used, in 64-bit arithmetic (the reference truncated to 16 bits and
// overflowed 32, §8.4). Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "accel/gga_format.hpp"
#include "core/status.hpp"

namespace zc::service {

// The most blocks one host IO may span (the reference's 8-bit limit was 255; its 0 wrapped).
inline constexpr uint32_t gga_max_blocks_per_io = 4096;

// What the three targets report and what the host is told: each target holds one slot per
// logical block (a half-block, and in format v2 the block's 16-byte entry), so the host sees
// twice the block size and as many blocks as a target has slots.
struct gga_geometry {
  uint64_t capacity = 0;    // bytes, as the host sees them
  uint32_t block_size = 0;  // B, as the host sees it (2 x Bt)
  uint32_t entry = 0;       // bytes of entry per slot: 0 (format v1) or 16 (v2)
  // The volume label's byte offset on each target: v2's label; in v1, where a v2 label would be
  // (a v1 service refuses a v2 volume).
  uint64_t label_at = 0;
  uint32_t half() const noexcept { return block_size / 2; }
  uint64_t blocks() const noexcept { return block_size == 0 ? 0 : capacity / block_size; }
  accel::gga_slot_layout slots() const noexcept { return {half(), entry}; }
  bool verified() const noexcept { return entry != 0; }
};

// The host's geometry from one target's answer (capacity, block size) in `format`: v1 doubles
// the capacity, v2 gives the blocks that fit the target's slots (FORMATS.md §4.3). Throws
// status_error(invalid_value) when there is none: block size 0, over 2^31 or too small for the
// codec, a capacity of 0, over 2^63, not whole blocks, or too small for one v2 slot.
gga_geometry double_geometry(uint64_t target_capacity, uint32_t target_block_size,
                             accel::gga_format format = accel::gga_format::v1);

// A write generation for format v2 entries: unique in this process and, as it follows the
// realtime clock in nanoseconds, above every generation an earlier run wrote (unless the clock
// went back by more than that run lasted). Any thread.
uint64_t gga_next_generation() noexcept;

// The smallest gga block (twice the targets' block size) the codec can take.
inline constexpr uint32_t gga_min_block_size = 64;

// Chunk layout per transaction in the service's memory: the three targets' slots one after the
// other, each exactly as the target stores it, so that one transfer moves a slot: in v2
// e1|D1 D2|e2 ep|P, the image D1|D2 contiguous at `entry`; in v1 (§6.1) d1 at 0, d2 at H, parity
// at B. Our compressor writes the image in place through its own scratch buffer, so the
// reference's 1.5B compressor scratch past B is not needed.
struct gga_chunk_layout {
  uint32_t block_size = 0;  // B
  uint32_t entry = 0;       // 0 (v1) or 16 (v2)
  accel::gga_slot_layout slots() const noexcept { return {block_size / 2, entry}; }
  uint64_t slot_at(uint32_t role) const noexcept { return uint64_t(role) * slots().slot(); }
  uint64_t half_at(uint32_t role) const noexcept {
    return slot_at(role) + slots().half_at(accel::gga_role(role));
  }
  uint64_t entry_at(uint32_t role) const noexcept {
    return slot_at(role) + slots().entry_at(accel::gga_role(role));
  }
  uint64_t image() const noexcept { return entry; }
  uint64_t d1() const noexcept { return half_at(0); }
  uint64_t d2() const noexcept { return half_at(1); }
  uint64_t parity() const noexcept { return half_at(2); }
  uint64_t size() const noexcept { return 3 * uint64_t(slots().slot()); }
};

// Bytes of the service region: workers x transactions x chunk, in 64 bits; throws
// status_error(no_memory) past `limit`.
uint64_t gga_region_size(uint32_t workers, uint32_t transactions, const gga_chunk_layout& chunk,
                         uint64_t limit);
// Offset of transaction t of worker w's chunk (§6.1): (w * N + t) * chunk.
inline uint64_t gga_chunk_offset(uint32_t worker, uint32_t transactions, uint32_t t,
                                 const gga_chunk_layout& chunk) noexcept {
  return (uint64_t(worker) * transactions + t) * chunk.size();
}

// A host read or write checked against the host region and the storage: k whole blocks,
// 1 <= k <= gga_max_blocks_per_io, storage_offset block aligned, both ranges inside.
struct gga_io_plan {
  uint32_t blocks = 0;         // k
  uint64_t host_offset = 0;    // block j's plain bytes at host_offset + j * B
  uint64_t target_offset = 0;  // block j's slot on each target at target_offset + j * S
};

// Checks a host IO (io_size, requester_offset, storage_offset). nullopt plus `why` when it is
// refused (the host gets INVALID_VALUE).
std::optional<gga_io_plan> plan_host_io(const gga_geometry& g, uint64_t host_region_size,
                                        uint32_t io_size, uint64_t requester_offset,
                                        uint64_t storage_offset, std::string* why = nullptr);

// Which half a recovery read rebuilds (§6.3): odd recovery counts lose data_2, even ones data_1.
// Returns the stripe index of the lost half (0 = d1, 1 = d2).
inline uint32_t gga_lost_half(uint64_t recovery_count) noexcept {
  return recovery_count % 2 == 1 ? 1 : 0;
}

// The every-n countdown of §6.3, per worker, in 64 bits (the reference's was 16). tick() at the
// start of every block read; true when this read goes through recovery.
class gga_recovery_trigger {
 public:
  explicit gga_recovery_trigger(uint64_t every_n) noexcept : every_(every_n), left_(every_n) {}
  bool tick() noexcept {
    if (every_ == 0) return false;
    if (--left_ != 0) return false;
    left_ = every_;
    return true;
  }

 private:
  uint64_t every_;
  uint64_t left_;
};

}  // namespace zc::service
