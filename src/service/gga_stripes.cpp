#include "service/gga_stripes.hpp"

#include <bit>

namespace zc::service {

gga_stripe_locks::gga_stripe_locks(size_t buckets) {
  const size_t n = std::bit_ceil(buckets < 2 ? size_t(2) : buckets);
  buckets_ = std::make_unique<std::atomic<uint64_t>[]>(n);
  shift_ = static_cast<unsigned>(64 - std::countr_zero(n));
}

bool gga_stripe_locks::begin_write(uint64_t block) noexcept {
  std::atomic<uint64_t>& b = bucket(block);
  uint64_t s = b.load(std::memory_order_acquire);
  do {
    if ((s & repair_bit) != 0) return false;
  } while (!b.compare_exchange_weak(s, s + write_one + version_one, std::memory_order_acq_rel,
                                    std::memory_order_acquire));
  return true;
}

bool gga_stripe_locks::begin_write_range(uint64_t first, uint64_t count) noexcept {
  uint64_t taken = 0;
  const bool all = each_bucket(first, count, [&](std::atomic<uint64_t>& b) {
    uint64_t s = b.load(std::memory_order_acquire);
    do {
      if ((s & repair_bit) != 0) return false;
    } while (!b.compare_exchange_weak(s, s + write_one + version_one, std::memory_order_acq_rel,
                                      std::memory_order_acquire));
    ++taken;
    return true;
  });
  if (all) return true;
  // Given back in the same order they were taken.
  (void)each_bucket(first, count, [&](std::atomic<uint64_t>& b) {
    if (taken == 0) return false;
    --taken;
    b.fetch_sub(write_one, std::memory_order_acq_rel);
    return true;
  });
  return false;
}

void gga_stripe_locks::end_write_range(uint64_t first, uint64_t count) noexcept {
  (void)each_bucket(first, count, [](std::atomic<uint64_t>& b) {
    b.fetch_sub(write_one, std::memory_order_acq_rel);
    return true;
  });
}

bool gga_stripe_locks::begin_repair(uint64_t block, snapshot seen) noexcept {
  if ((seen & (repair_bit | writes_mask)) != 0) return false;
  return bucket(block).compare_exchange_strong(seen, seen | repair_bit, std::memory_order_acq_rel,
                                               std::memory_order_acquire);
}

}  // namespace zc::service
