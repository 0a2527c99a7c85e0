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

#include "core/status.hpp"

namespace zc::service {

// The most blocks one host IO may span (the reference's 8-bit limit was 255; its 0 wrapped).
inline constexpr uint32_t gga_max_blocks_per_io = 4096;

// What the three targets report and what the host is told: each target holds one half-block per
// logical block, so the host sees twice the capacity and twice the block size.
struct gga_geometry {
  uint64_t capacity = 0;    // bytes, as the host sees them (2 x a target's)
  uint32_t block_size = 0;  // B, as the host sees it (2 x Bt)
  uint32_t half() const noexcept { return block_size / 2; }
  uint64_t blocks() const noexcept { return block_size == 0 ? 0 : capacity / block_size; }
};

// The host's geometry from one target's answer (capacity, block size). Throws
// status_error(invalid_value) when it cannot be doubled: block size 0 or over 2^31, a capacity
// of 0, over 2^63, or not whole blocks.
gga_geometry double_geometry(uint64_t target_capacity, uint32_t target_block_size);

// Chunk layout per transaction in the service's memory (§6.1): d1 at 0, d2 at H, parity at B.
// Our compressor writes the image in place through its own scratch buffer, so the reference's
// 1.5B compressor scratch past B is not needed: 1.5B serves reads and writes.
// The smallest gga block (twice the targets' block size) the codec can take.
inline constexpr uint32_t gga_min_block_size = 64;

struct gga_chunk_layout {
  uint32_t block_size = 0;  // B
  uint64_t d1() const noexcept { return 0; }
  uint64_t d2() const noexcept { return block_size / 2; }
  uint64_t parity() const noexcept { return block_size; }
  uint64_t size() const noexcept { return uint64_t(block_size) + block_size / 2; }
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
  uint64_t target_offset = 0;  // block j's half on each target at target_offset + j * H
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
