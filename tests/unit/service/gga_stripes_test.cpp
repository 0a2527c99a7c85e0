#include "service/gga_stripes.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace zc::service {
namespace {

// A repair goes ahead on what its read saw only while no write of the block began since.
TEST(gga_stripe_locks, a_write_begun_after_the_read_looked_stops_the_repair) {
  gga_stripe_locks locks(64);
  const auto seen = locks.observe(7);
  ASSERT_TRUE(locks.begin_write(7));
  locks.end_write(7);
  EXPECT_FALSE(locks.begin_repair(7, seen));
  // A read that begins now may repair.
  EXPECT_TRUE(locks.begin_repair(7, locks.observe(7)));
  locks.end_repair(7);
}

// A write still landing when the read looked may have left the slots the read paired: no repair
// from that read, even once the write ended.
TEST(gga_stripe_locks, a_write_in_flight_when_the_read_looked_stops_the_repair) {
  gga_stripe_locks locks(64);
  ASSERT_TRUE(locks.begin_write(3));
  const auto seen = locks.observe(3);
  EXPECT_FALSE(locks.begin_repair(3, seen));
  locks.end_write(3);
  EXPECT_FALSE(locks.begin_repair(3, seen));
}

// While a repair is in flight, a write of its block waits; once it ended, the write goes.
TEST(gga_stripe_locks, a_write_waits_for_a_repair_in_flight) {
  gga_stripe_locks locks(64);
  ASSERT_TRUE(locks.begin_repair(11, locks.observe(11)));
  EXPECT_FALSE(locks.begin_write(11));
  // One repair at a time: a second read's repair of the block is refused.
  EXPECT_FALSE(locks.begin_repair(11, locks.observe(11)));
  locks.end_repair(11);
  EXPECT_TRUE(locks.begin_write(11));
  locks.end_write(11);
}

// Writes never wait for each other.
TEST(gga_stripe_locks, writes_of_one_block_overlap) {
  gga_stripe_locks locks(1);
  ASSERT_TRUE(locks.begin_write(1));
  ASSERT_TRUE(locks.begin_write(1));
  locks.end_write(1);
  EXPECT_FALSE(locks.begin_repair(1, locks.observe(1)));
  locks.end_write(1);
  EXPECT_TRUE(locks.begin_repair(1, locks.observe(1)));
  locks.end_repair(1);
}

// A discard of a range counts as a write of each of its blocks: all or none, given back whole.
TEST(gga_stripe_locks, a_range_is_taken_whole_or_not_at_all) {
  gga_stripe_locks locks(64);
  for (const uint64_t count : {uint64_t(5), uint64_t(1000)}) {  // fewer and more than buckets
    ASSERT_TRUE(locks.begin_repair(102, locks.observe(102)));
    EXPECT_FALSE(locks.begin_write_range(100, count)) << count;
    // Nothing was kept: a write of a block of the range has only the repair to wait for.
    const auto seen = locks.observe(101);
    EXPECT_EQ(seen & gga_stripe_locks::writes_mask, 0u) << count;
    locks.end_repair(102);
    ASSERT_TRUE(locks.begin_write_range(100, count)) << count;
    for (uint64_t b : {uint64_t(100), uint64_t(104), uint64_t(100 + count - 1)})
      EXPECT_FALSE(locks.begin_repair(b, locks.observe(b))) << count << " " << b;
    locks.end_write_range(100, count);
    for (uint64_t b = 0; b < 2000; ++b)
      EXPECT_EQ(locks.observe(b) & gga_stripe_locks::writes_mask, 0u) << count << " " << b;
  }
}

// Threads hammering one bucket: a repair never overlaps a write, and every lock is given back.
// Each thread works until both kinds have got the bucket `enough` times (a kind that has idles,
// so that the other is not starved: a repair fails whenever a write began since it looked).
TEST(gga_stripe_locks, repairs_and_writes_exclude_each_other_across_threads) {
  constexpr int enough = 500;
  gga_stripe_locks locks(1);
  std::atomic<int> writers{0}, repairers{0}, overlaps{0}, writes{0}, repairs{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto working = [&] {
    return (writes.load() < enough || repairs.load() < enough) &&
           std::chrono::steady_clock::now() < deadline;
  };
  auto writer = [&] {
    while (working()) {
      if (writes.load() >= enough || !locks.begin_write(5)) {
        std::this_thread::yield();
        continue;
      }
      writers.fetch_add(1);
      writes.fetch_add(1);
      if (repairers.load() != 0) overlaps.fetch_add(1);
      writers.fetch_sub(1);
      locks.end_write(5);
    }
  };
  auto repairer = [&] {
    while (working()) {
      if (repairs.load() >= enough || !locks.begin_repair(5, locks.observe(5))) {
        std::this_thread::yield();
        continue;
      }
      repairers.fetch_add(1);
      repairs.fetch_add(1);
      if (writers.load() != 0 || repairers.load() != 1) overlaps.fetch_add(1);
      repairers.fetch_sub(1);
      locks.end_repair(5);
    }
  };
  std::vector<std::thread> threads;
  threads.emplace_back(writer);
  threads.emplace_back(writer);
  threads.emplace_back(repairer);
  threads.emplace_back(repairer);
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  // Both kinds got the bucket: the exclusion was exercised, not avoided.
  EXPECT_GE(writes.load(), enough);
  EXPECT_GE(repairs.load(), enough);
  const auto s = locks.observe(5);
  EXPECT_EQ(s & (gga_stripe_locks::repair_bit | gga_stripe_locks::writes_mask), 0u);
}

}  // namespace
}  // namespace zc::service
