#include "core/ring.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <random>
#include <string>

namespace zc::core {
namespace {

// Against std::deque as the model: random pushes, pops and removals across many wraps and
// growths keep the same elements in the same order.
TEST(ring, behaves_as_a_fifo_across_wraps_and_growth) {
  ring<int> r;
  std::deque<int> model;
  std::mt19937 rng(7);
  int next = 0;
  for (int step = 0; step < 20000; ++step) {
    const unsigned what = rng() % 10;
    if (what < 5) {
      r.push_back(next);
      model.push_back(next++);
    } else if (what < 9) {
      if (!model.empty()) {
        ASSERT_EQ(r.front(), model.front());
        r.pop_front();
        model.pop_front();
      }
    } else {
      const int mod = 2 + static_cast<int>(rng() % 5);
      const size_t removed = erase_if(r, [mod](int v) { return v % mod == 0; });
      const size_t before = model.size();
      std::erase_if(model, [mod](int v) { return v % mod == 0; });
      ASSERT_EQ(removed, before - model.size());
    }
    ASSERT_EQ(r.size(), model.size());
    ASSERT_EQ(r.empty(), model.empty());
    size_t i = 0;
    for (int v : r) ASSERT_EQ(v, model[i++]);
    ASSERT_EQ(i, model.size());
    if (!model.empty()) {
      ASSERT_EQ(r.back(), model.back());
    }
  }
}

TEST(ring, grows_only_past_its_capacity_and_never_shrinks) {
  ring<int> r;
  r.reserve(16);
  EXPECT_EQ(r.capacity(), 16u);
  for (int round = 0; round < 100; ++round) {
    for (int i = 0; i < 16; ++i) r.push_back(i);
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(r.front(), i);
      r.pop_front();
    }
  }
  EXPECT_EQ(r.capacity(), 16u);
  for (int i = 0; i < 17; ++i) r.push_back(i);
  EXPECT_EQ(r.capacity(), 32u);
  r.clear();
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.capacity(), 32u);
}

// A popped or removed element is destroyed then, not when its slot is next used.
TEST(ring, lets_go_of_what_it_removes_at_once) {
  auto held = std::make_shared<std::string>("x");
  ring<std::shared_ptr<std::string>> r;
  r.push_back(held);
  r.push_back(held);
  EXPECT_EQ(held.use_count(), 3);
  r.pop_front();
  EXPECT_EQ(held.use_count(), 2);
  EXPECT_EQ(erase(r, held), 1u);
  EXPECT_EQ(held.use_count(), 1);
  EXPECT_TRUE(r.empty());
}

}  // namespace
}  // namespace zc::core
