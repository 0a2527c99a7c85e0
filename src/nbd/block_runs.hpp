// Which blocks of a worker's IO memory are taken, at the granularity of one block: the memory is
// cut into slices of up to 128 blocks (the most one IO message moves), and take(n) finds n free
// blocks in a row inside one slice, first fit. A 4 KiB request then holds 4 KiB, not a slice.
//
//   block_runs m(slices, 128);
//   if (auto r = m.take(3)) { ... r->slice, r->first ...; m.give_back(*r); }
//
// Thread rules: none (the NBD backend uses it on the server's thread only).
#pragma once

#include <bit>
#include <cstdint>
#include <optional>
#include <vector>

namespace zc::nbd {

class block_runs {
 public:
  static constexpr uint32_t max_blocks_per_slice = 128;

  struct run {
    uint32_t slice = 0;
    uint32_t first = 0;  // block in the slice
    uint32_t blocks = 0;
  };

  // `blocks_per_slice` in 1..128.
  block_runs(uint32_t slices, uint32_t blocks_per_slice)
      : taken_(slices, outside(blocks_per_slice)), blocks_per_slice_(blocks_per_slice) {}

  // n free blocks in a row (1 <= n <= blocks per slice), marked taken; nullopt when no slice has
  // them.
  std::optional<run> take(uint32_t n) noexcept {
    if (n == 0 || n > blocks_per_slice_) return std::nullopt;
    for (uint32_t s = 0; s < taken_.size(); ++s) {
      if (taken_[s] == all) continue;
      // Bit p of starts: blocks p .. p+n-1 are all free (each step doubles the run checked).
      mask starts = ~taken_[s];
      for (uint32_t have = 1; have < n;) {
        const uint32_t step = have < n - have ? have : n - have;
        starts &= starts >> step;
        have += step;
      }
      if (starts == 0) continue;
      const auto low = static_cast<uint64_t>(starts);
      const uint32_t first =
          low != 0
              ? static_cast<uint32_t>(std::countr_zero(low))
              : 64 + static_cast<uint32_t>(std::countr_zero(static_cast<uint64_t>(starts >> 64)));
      taken_[s] |= ones(n) << first;
      free_blocks_ -= n;
      return run{s, first, n};
    }
    return std::nullopt;
  }

  void give_back(const run& r) noexcept {
    taken_[r.slice] &= ~(ones(r.blocks) << r.first);
    free_blocks_ += r.blocks;
  }

  uint64_t free_blocks() const noexcept { return free_blocks_; }

 private:
  using mask = unsigned __int128;  // bit b: block b of the slice is taken
  static constexpr mask all = ~mask(0);

  static mask ones(uint32_t n) noexcept { return n >= 128 ? all : (mask(1) << n) - 1; }
  // The bits past the slice's last block, marked taken for good.
  static mask outside(uint32_t blocks) noexcept { return ~ones(blocks); }

  std::vector<mask> taken_;
  uint32_t blocks_per_slice_;
  uint64_t free_blocks_ = uint64_t(taken_.size()) * blocks_per_slice_;
};

}  // namespace zc::nbd
