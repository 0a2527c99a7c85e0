// One bit per block of the target's storage, shared by every worker of every session: which
// blocks a memory target holds data in, or which blocks of a backing file may be holes. Bits are
// set and cleared with atomic read-modify-writes, so workers need no lock; a reader sees each
// word whole, but a range that others change meanwhile may be seen half old, half new (the IOs
// that change it are not ordered against the one that reads it anyway).
//
//   block_bitmap holes(block_count);
//   holes.set(first, count);
//   if (holes.any(first, count)) ...
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace zc::target {

class block_bitmap {
 public:
  // `blocks` bits, all 0.
  explicit block_bitmap(uint64_t blocks)
      : blocks_(blocks), words_(std::make_unique<std::atomic<uint64_t>[]>(word_count(blocks))) {}

  uint64_t size() const noexcept { return blocks_; }
  bool test(uint64_t block) const noexcept {
    return (words_[block / bits].load(std::memory_order_relaxed) >> (block % bits)) & 1;
  }
  // [first, first + count) must lie inside the bitmap (the callers checked the IO's range).
  void set(uint64_t first, uint64_t count) noexcept {
    for_words(first, count, [](std::atomic<uint64_t>& w, uint64_t mask) {
      w.fetch_or(mask, std::memory_order_relaxed);
    });
  }
  void clear(uint64_t first, uint64_t count) noexcept {
    for_words(first, count, [](std::atomic<uint64_t>& w, uint64_t mask) {
      w.fetch_and(~mask, std::memory_order_relaxed);
    });
  }
  bool any(uint64_t first, uint64_t count) const noexcept {
    bool found = false;
    for_words(first, count, [&found](const std::atomic<uint64_t>& w, uint64_t mask) {
      found = found || (w.load(std::memory_order_relaxed) & mask) != 0;
    });
    return found;
  }

 private:
  static constexpr uint64_t bits = 64;
  static uint64_t word_count(uint64_t blocks) noexcept { return (blocks + bits - 1) / bits; }

  // Calls f(word, mask) for each word that [first, first + count) touches, with the bits of the
  // range in that word.
  template <typename F>
  void for_words(uint64_t first, uint64_t count, F f) const noexcept {
    const uint64_t end = first + count;
    for (uint64_t at = first; at < end;) {
      const uint64_t word = at / bits, from = at % bits;
      const uint64_t to = std::min<uint64_t>(bits, from + (end - at));
      const uint64_t mask = (to - from == bits ? ~uint64_t(0) : ((uint64_t(1) << (to - from)) - 1))
                            << from;
      f(words_[word], mask);
      at += to - from;
    }
  }

  uint64_t blocks_;
  std::unique_ptr<std::atomic<uint64_t>[]> words_;
};

}  // namespace zc::target
