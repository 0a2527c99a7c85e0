// block_runs: runs of free blocks inside slices, first fit, exact sizes, nothing lost or doubled.
#include "nbd/block_runs.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <vector>

namespace zc::nbd {
namespace {

TEST(block_runs, small_runs_pack_one_slice_and_a_whole_slice_takes_the_next) {
  block_runs m(2, 128);
  auto a = m.take(1);
  auto b = m.take(3);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->slice, 0u);
  EXPECT_EQ(a->first, 0u);
  EXPECT_EQ(b->slice, 0u);
  EXPECT_EQ(b->first, 1u);
  auto whole = m.take(128);
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->slice, 1u);
  EXPECT_FALSE(m.take(128));  // slice 0 has 124 free blocks, not 128 in a row
  EXPECT_EQ(m.free_blocks(), 124u);
  m.give_back(*a);
  auto c = m.take(1);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->slice, 0u);
  EXPECT_EQ(c->first, 0u);  // the hole it left
  m.give_back(*b);
  m.give_back(*c);
  EXPECT_TRUE(m.take(128));
}

TEST(block_runs, a_run_never_crosses_a_used_block_or_the_slice_end) {
  block_runs m(1, 100);  // bits 100..127 are outside
  auto head = m.take(60);
  auto hole = m.take(10);
  auto tail = m.take(30);
  ASSERT_TRUE(head && hole && tail);
  EXPECT_EQ(tail->first, 70u);
  EXPECT_FALSE(m.take(1));
  m.give_back(*hole);
  EXPECT_FALSE(m.take(11));
  auto again = m.take(10);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->first, 60u);
  EXPECT_FALSE(m.take(0));
  EXPECT_FALSE(m.take(101));
}

// Random takes and gives, checked against a plain array of owners: no block is handed out twice,
// and a run is found whenever one exists.
TEST(block_runs, random_use_matches_a_plain_model) {
  constexpr uint32_t slices = 4, per_slice = 128;
  block_runs m(slices, per_slice);
  std::vector<int> owner(slices * per_slice, -1);
  std::vector<std::optional<block_runs::run>> held(64);
  std::mt19937 rng(5);
  auto exists = [&](uint32_t n) {
    for (uint32_t s = 0; s < slices; ++s)
      for (uint32_t f = 0; f + n <= per_slice; ++f) {
        bool free = true;
        for (uint32_t k = 0; k < n && free; ++k) free = owner[s * per_slice + f + k] < 0;
        if (free) return true;
      }
    return false;
  };
  for (int step = 0; step < 20000; ++step) {
    const size_t i = rng() % held.size();
    if (held[i]) {
      for (uint32_t k = 0; k < held[i]->blocks; ++k)
        owner[held[i]->slice * per_slice + held[i]->first + k] = -1;
      m.give_back(*held[i]);
      held[i].reset();
      continue;
    }
    const uint32_t n = 1 + (rng() % 4 == 0 ? rng() % per_slice : rng() % 8);
    const bool expected = exists(n);
    held[i] = m.take(n);
    ASSERT_EQ(held[i].has_value(), expected) << "step " << step << ", " << n << " blocks";
    if (!held[i]) continue;
    ASSERT_EQ(held[i]->blocks, n);
    for (uint32_t k = 0; k < n; ++k) {
      auto& o = owner[held[i]->slice * per_slice + held[i]->first + k];
      ASSERT_LT(o, 0) << "block handed out twice at step " << step;
      o = static_cast<int>(i);
    }
  }
}

}  // namespace
}  // namespace zc::nbd
