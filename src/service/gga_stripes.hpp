// Repairs ordered against writes of the same block, across the workers of a gga session (md's
// stripe_head, reduced to what a repair needs). A read that finds a bad slot rewrites it from the
// pair it verified; a host write of that block that began after the read looked, or was still
// landing while it looked, would be undone on that target by the repair (a stale slot beside two
// fresh ones, which a later loss turns into an unreadable block). So a repair goes ahead only if
// no write of its block began or was in flight since its read began, and a write waits while a
// repair of its block is in flight. Writes never wait for each other (their generations already
// keep two writes' slots from pairing). Blocks share buckets by hash: a collision only skips a
// repair (the next read finds the slot again) or delays a write by one repair.
// Thread rules: any thread; lock-free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace zc::service {

class gga_stripe_locks {
 public:
  // What a read saw when it began, for begin_repair.
  using snapshot = uint64_t;

  // `buckets` is rounded up to a power of two (at least 2).
  explicit gga_stripe_locks(size_t buckets);

  snapshot observe(uint64_t block) const noexcept {
    return bucket(block).load(std::memory_order_acquire);
  }
  // False while a repair of the block's bucket is in flight: try again later. Each true is
  // followed by exactly one end_write, once the write's slots are written or given up.
  bool begin_write(uint64_t block) noexcept;
  void end_write(uint64_t block) noexcept {
    bucket(block).fetch_sub(write_one, std::memory_order_acq_rel);
  }
  // The same for blocks [first, first + count) at once (a discard or write zeroes): all or none
  // (false: a repair of one of them is in flight, try again later); end_write_range with the
  // same range gives them back.
  bool begin_write_range(uint64_t first, uint64_t count) noexcept;
  void end_write_range(uint64_t first, uint64_t count) noexcept;
  // True (and the repair holds the bucket until end_repair) only if, since `seen` was observed,
  // no write of the bucket began, and none was in flight when it was observed.
  bool begin_repair(uint64_t block, snapshot seen) noexcept;
  void end_repair(uint64_t block) noexcept {
    bucket(block).fetch_and(~repair_bit, std::memory_order_acq_rel);
  }

  // The layout of a bucket's word: a repair in flight, writes in flight, writes begun.
  static constexpr uint64_t repair_bit = 1;
  static constexpr uint64_t write_one = 2;  // bits 1-20: writes in flight
  static constexpr uint64_t writes_mask = ((uint64_t(1) << 20) - 1) << 1;
  static constexpr uint64_t version_one = uint64_t(1) << 21;  // bits 21-63: writes begun

 private:
  size_t buckets() const noexcept { return size_t(1) << (64 - shift_); }
  // Calls f on the bucket of every block of the range, each bucket once when the range has
  // at least as many blocks as there are buckets; stops at the first false.
  template <typename F>
  bool each_bucket(uint64_t first, uint64_t count, F f) const noexcept {
    if (count >= buckets()) {
      for (size_t i = 0; i < buckets(); ++i)
        if (!f(buckets_[i])) return false;
      return true;
    }
    for (uint64_t j = 0; j < count; ++j)
      if (!f(bucket(first + j))) return false;
    return true;
  }
  std::atomic<uint64_t>& bucket(uint64_t block) const noexcept {
    // Fibonacci hashing: neighbouring blocks land in different buckets.
    return buckets_[(block * 0x9E3779B97F4A7C15ull) >> shift_];
  }

  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  unsigned shift_ = 63;
};

}  // namespace zc::service
