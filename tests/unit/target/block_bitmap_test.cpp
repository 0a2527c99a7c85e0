// block_bitmap: ranges set, cleared and looked for across word boundaries, and nothing outside
// the range touched.
#include "target/block_bitmap.hpp"

#include <gtest/gtest.h>

namespace zc::target {
namespace {

TEST(block_bitmap, ranges_across_words_touch_only_their_bits) {
  block_bitmap b(200);
  EXPECT_EQ(b.size(), 200u);
  EXPECT_FALSE(b.any(0, 200));
  b.set(60, 70);  // words 0, 1 and 2
  for (uint64_t i = 0; i < 200; ++i) EXPECT_EQ(b.test(i), i >= 60 && i < 130) << i;
  EXPECT_TRUE(b.any(0, 61));
  EXPECT_FALSE(b.any(0, 60));
  EXPECT_FALSE(b.any(130, 70));
  EXPECT_TRUE(b.any(129, 1));
  b.clear(64, 64);  // exactly word 1
  for (uint64_t i = 0; i < 200; ++i)
    EXPECT_EQ(b.test(i), (i >= 60 && i < 64) || (i >= 128 && i < 130)) << i;
  b.set(199, 1);
  EXPECT_TRUE(b.test(199));
  b.clear(0, 200);
  EXPECT_FALSE(b.any(0, 200));
}

}  // namespace
}  // namespace zc::target
