#include "service/gga_layout.hpp"

#include <fmt/format.h>

#include <atomic>
#include <chrono>

namespace zc::service {

gga_geometry double_geometry(uint64_t target_capacity, uint32_t target_block_size,
                             accel::gga_format format) {
  if (target_block_size == 0 || target_block_size > UINT32_MAX / 2)
    throw status_error(status::invalid_value,
                       fmt::format("storage block size {} cannot be doubled", target_block_size));
  // The LZ4 image of a block needs room for its header and the codec's worst case in the two
  // halves: below 64 bytes a block cannot hold even a trivial one.
  if (target_block_size * 2 < gga_min_block_size)
    throw status_error(status::invalid_value,
                       fmt::format("storage block size {} gives gga blocks of {} bytes; at least "
                                   "{} are needed",
                                   target_block_size, target_block_size * 2, gga_min_block_size));
  if (target_capacity == 0 || target_capacity > UINT64_MAX / 2 ||
      target_capacity % target_block_size != 0)
    throw status_error(status::invalid_value,
                       fmt::format("storage capacity {} is not whole blocks of {}", target_capacity,
                                   target_block_size));
  if (format == accel::gga_format::v1)
    return {target_capacity * 2, target_block_size * 2, 0,
            (target_capacity / target_block_size - 1) * target_block_size};
  const auto slots = accel::gga_slot_layout::of(format, target_block_size);
  const uint64_t blocks = slots.blocks_in(target_capacity / target_block_size);
  if (blocks == 0)
    throw status_error(status::invalid_value,
                       fmt::format("storage of {} bytes holds no gga format v2 block of {} bytes "
                                   "(at least {} blocks of {} bytes are needed)",
                                   target_capacity, target_block_size * 2,
                                   slots.target_blocks_for(1), target_block_size));
  return {blocks * target_block_size * 2, target_block_size * 2, slots.entry,
          slots.label_at(target_capacity / target_block_size)};
}

uint64_t gga_next_generation() noexcept {
  static std::atomic<uint64_t> last{0};
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const uint64_t clock =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count());
  uint64_t seen = last.load(std::memory_order_relaxed);
  uint64_t next = 0;
  do {
    next = clock > seen ? clock : seen + 1;
  } while (!last.compare_exchange_weak(seen, next, std::memory_order_relaxed));
  return next;
}

uint64_t gga_region_size(uint32_t workers, uint32_t transactions, const gga_chunk_layout& chunk,
                         uint64_t limit) {
  const uint64_t chunks = uint64_t(workers) * transactions;
  if (chunk.size() != 0 && chunks > limit / chunk.size())
    throw status_error(status::no_memory,
                       fmt::format("{} workers x {} transactions x {} bytes exceed {} bytes",
                                   workers, transactions, chunk.size(), limit));
  return chunks * chunk.size();
}

std::optional<gga_io_plan> plan_host_io(const gga_geometry& g, uint64_t host_region_size,
                                        uint32_t io_size, uint64_t requester_offset,
                                        uint64_t storage_offset, std::string* why) {
  auto refuse = [why](std::string text) -> std::optional<gga_io_plan> {
    if (why != nullptr) *why = std::move(text);
    return std::nullopt;
  };
  const uint64_t b = g.block_size;
  if (b == 0) return refuse("no geometry");
  if (io_size == 0 || io_size % b != 0)
    return refuse(fmt::format("io_size {} is not a whole number of {}-byte blocks", io_size, b));
  const uint64_t k = io_size / b;
  if (k > gga_max_blocks_per_io)
    return refuse(fmt::format("{} blocks in one IO, at most {}", k, gga_max_blocks_per_io));
  if (storage_offset % b != 0)
    return refuse(fmt::format("storage offset {} is not block aligned", storage_offset));
  if (storage_offset > g.capacity || io_size > g.capacity - storage_offset)
    return refuse(fmt::format("storage range {}+{} is outside the {} bytes of storage",
                              storage_offset, io_size, g.capacity));
  if (requester_offset > host_region_size || io_size > host_region_size - requester_offset)
    return refuse(fmt::format("host range {}+{} is outside the {}-byte host region",
                              requester_offset, io_size, host_region_size));
  return gga_io_plan{static_cast<uint32_t>(k), requester_offset,
                     storage_offset / b * g.slots().slot()};
}

}  // namespace zc::service
