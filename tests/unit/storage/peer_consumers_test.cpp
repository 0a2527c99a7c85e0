#include "storage/peer_consumers.hpp"

#include <gtest/gtest.h>

namespace zc::storage {
namespace {

using kind = storage::consumer_event::kind;

storage::consumer_event created(uint32_t id) {
  return {kind::created, id};
}
storage::consumer_event expired(uint32_t id) {
  return {kind::expired, id};
}

TEST(peer_consumers, worker_i_pairs_with_the_ith_smallest_id_whatever_the_arrival_order) {
  peer_consumers c;
  // Events of three consumers arriving out of creation order (the reference paired by arrival).
  c.apply(created(7));
  c.apply(created(3));
  c.apply(created(5));
  EXPECT_TRUE(c.ready(3));
  EXPECT_EQ(c.ids(), (std::vector<uint32_t>{3, 5, 7}));
  EXPECT_EQ(c.for_worker(0), 3u);
  EXPECT_EQ(c.for_worker(1), 5u);
  EXPECT_EQ(c.for_worker(2), 7u);
  EXPECT_EQ(c.for_worker(3), std::nullopt);
}

TEST(peer_consumers, not_ready_until_every_worker_has_its_consumer) {
  peer_consumers c;
  EXPECT_TRUE(c.empty());
  EXPECT_FALSE(c.ready(1));
  EXPECT_TRUE(c.ready(0));
  c.apply(created(1));
  EXPECT_TRUE(c.ready(1));
  EXPECT_FALSE(c.ready(2));
}

TEST(peer_consumers, expired_consumers_leave_and_the_pairing_follows_the_live_ones) {
  peer_consumers c;
  c.apply(created(1));
  c.apply(created(2));
  c.apply(expired(1));
  EXPECT_EQ(c.ids(), (std::vector<uint32_t>{2}));
  // A peer that restarts its workers gets new, larger ids: the order still holds.
  c.apply(expired(2));
  EXPECT_TRUE(c.empty());
  c.apply(created(4));
  c.apply(created(3));
  EXPECT_EQ(c.for_worker(0), 3u);
  EXPECT_EQ(c.for_worker(1), 4u);
}

TEST(peer_consumers, repeated_and_unknown_events_change_nothing) {
  peer_consumers c;
  c.apply(created(9));
  c.apply(created(9));
  EXPECT_EQ(c.size(), 1u);
  c.apply(expired(42));
  EXPECT_EQ(c.ids(), (std::vector<uint32_t>{9}));
  c.apply(expired(9));
  c.apply(expired(9));
  EXPECT_TRUE(c.empty());
}

}  // namespace
}  // namespace zc::storage
