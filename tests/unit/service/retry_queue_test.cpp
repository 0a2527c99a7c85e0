#include "service/retry_queue.hpp"

#include <gtest/gtest.h>

namespace zc::service {
namespace {

TEST(retry_queue, keys_come_back_oldest_first_across_the_wrap) {
  retry_queue q(3);
  EXPECT_TRUE(q.empty());
  for (uint32_t round = 0; round < 5; ++round) {
    EXPECT_TRUE(q.push(round * 10 + 1));
    EXPECT_TRUE(q.push(round * 10 + 2));
    EXPECT_EQ(q.size(), 2u);
    EXPECT_EQ(q.front(), round * 10 + 1);
    q.pop();
    EXPECT_EQ(q.front(), round * 10 + 2);
    q.pop();
    EXPECT_TRUE(q.empty());
  }
}

TEST(retry_queue, a_full_queue_refuses_instead_of_overwriting) {
  retry_queue q(2);
  EXPECT_TRUE(q.push(1));
  EXPECT_TRUE(q.push(2));
  EXPECT_FALSE(q.push(3));
  EXPECT_EQ(q.front(), 1u);
  q.pop();
  q.pop();
  q.pop();  // popping an empty queue changes nothing
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(q.push(4));
  EXPECT_EQ(q.front(), 4u);
}

}  // namespace
}  // namespace zc::service
