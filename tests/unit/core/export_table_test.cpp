// The process-wide RDMA export table: what a peer's request may touch (token, id, range,
// permission), and that a withdrawal never returns while a claim on the memory is live.
#include "core/export_table.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

namespace zc::core {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t region_size = 256;
constexpr uint64_t max_u64 = std::numeric_limits<uint64_t>::max();
constexpr auto bound = 10s;

// One export, removed at the end of the test.
class export_table_test : public testing::Test {
 protected:
  void SetUp() override {
    id = export_table::add(memory.data(), memory.size(), access::rdma_read | access::rdma_write);
  }
  void TearDown() override { export_table::remove(id); }

  status acquire(uint64_t offset, uint64_t length, access needed = access::rdma_read) {
    return export_table::acquire(process_token(), id, offset, length, needed, claim);
  }

  std::vector<uint8_t> memory = std::vector<uint8_t>(region_size);
  uint64_t id = 0;
  export_table::claim claim;
};

TEST_F(export_table_test, ids_are_never_zero) {
  EXPECT_NE(id, 0u);
}

TEST_F(export_table_test, acquire_in_range_with_permission_points_into_the_region) {
  ASSERT_EQ(acquire(16, 32), status::success);
  EXPECT_TRUE(claim);
  EXPECT_EQ(claim.data(), memory.data() + 16);
  ASSERT_EQ(acquire(0, region_size, access::rdma_write), status::success);
  EXPECT_EQ(claim.data(), memory.data());
  ASSERT_EQ(acquire(region_size - 1, 1, access::rdma_read | access::rdma_write), status::success);
  EXPECT_EQ(claim.data(), memory.data() + region_size - 1);
}

TEST_F(export_table_test, empty_range_at_the_end_is_in_range) {
  EXPECT_EQ(acquire(region_size, 0), status::success);
}

TEST_F(export_table_test, out_of_range_is_invalid_value) {
  const std::pair<uint64_t, uint64_t> cases[] = {
      {0, region_size + 1}, {1, region_size},
      {region_size, 1},     {region_size + 1, 0},
      {1, max_u64},  // offset + length wraps to 0
      {max_u64, 2},  // wraps to 1
      {max_u64, 0},         {region_size / 2, max_u64 - region_size / 2 + 1},  // wraps exactly to 0
  };
  for (auto [offset, length] : cases) {
    EXPECT_EQ(acquire(offset, length), status::invalid_value)
        << "offset " << offset << " length " << length;
    EXPECT_FALSE(claim);
  }
}

TEST_F(export_table_test, missing_permission_is_not_permitted) {
  EXPECT_EQ(acquire(0, 8, access::rdma_atomic), status::not_permitted);
  EXPECT_EQ(acquire(0, 8, access::rdma_read | access::rdma_atomic), status::not_permitted);
  EXPECT_FALSE(claim);

  std::vector<uint8_t> read_only(64);
  const uint64_t ro = export_table::add(read_only.data(), read_only.size(), access::rdma_read);
  EXPECT_EQ(export_table::acquire(process_token(), ro, 0, 8, access::rdma_write, claim),
            status::not_permitted);
  EXPECT_EQ(export_table::acquire(process_token(), ro, 0, 8, access::rdma_read, claim),
            status::success);
  claim.reset();
  export_table::remove(ro);
}

TEST_F(export_table_test, foreign_token_is_not_permitted) {
  for (uint64_t token :
       {process_token() + 1, uint64_t{process_token() ^ 0x8000000000000000ull}, uint64_t{0}}) {
    EXPECT_EQ(export_table::acquire(token, id, 0, 8, access::rdma_read, claim),
              status::not_permitted);
    EXPECT_FALSE(claim);
  }
}

TEST_F(export_table_test, unknown_ids_are_not_found) {
  const uint64_t slot = id & 0xFFFFFFFFu;
  const uint64_t generation = id >> 32;
  for (uint64_t bogus : {uint64_t{0}, (generation << 32) | 0xFFFFFFFFu,
                         ((generation + 1) << 32) | slot,     // even generation: never live
                         ((generation + 2) << 32) | slot}) {  // a later generation
    EXPECT_EQ(export_table::acquire(process_token(), bogus, 0, 8, access::rdma_read, claim),
              status::not_found)
        << std::hex << bogus;
    EXPECT_FALSE(claim);
  }
}

TEST_F(export_table_test, withdrawn_export_is_not_found) {
  export_table::remove(id);
  EXPECT_EQ(acquire(0, 8), status::not_found);
  EXPECT_FALSE(claim);
}

TEST_F(export_table_test, old_id_stays_dead_when_its_slot_is_reused) {
  export_table::remove(id);
  const uint64_t old = id;
  id = export_table::add(memory.data(), memory.size(), access::rdma_read);
  EXPECT_NE(id, old);
  EXPECT_EQ(export_table::acquire(process_token(), old, 0, 8, access::rdma_read, claim),
            status::not_found);
  EXPECT_EQ(acquire(0, 8), status::success);
}

TEST_F(export_table_test, removing_twice_or_an_unknown_id_is_harmless) {
  export_table::remove(id);
  export_table::remove(id);
  export_table::remove(0);
  export_table::remove(max_u64);
  EXPECT_EQ(acquire(0, 8), status::not_found);
}

TEST_F(export_table_test, claim_moves_and_resets) {
  ASSERT_EQ(acquire(8, 8), status::success);
  export_table::claim moved(std::move(claim));
  EXPECT_FALSE(claim);
  EXPECT_TRUE(moved);
  EXPECT_EQ(moved.data(), memory.data() + 8);
  export_table::claim assigned;
  assigned = std::move(moved);
  EXPECT_FALSE(moved);
  EXPECT_TRUE(assigned);
  assigned.reset();
  EXPECT_FALSE(assigned);
  EXPECT_EQ(assigned.data(), nullptr);
}

TEST_F(export_table_test, failed_acquire_drops_an_earlier_claim) {
  ASSERT_EQ(acquire(0, 8), status::success);
  EXPECT_EQ(acquire(0, region_size + 1), status::invalid_value);
  EXPECT_FALSE(claim);
}

TEST(export_table, claim_held_on_another_thread_delays_remove_until_released) {
  std::vector<uint8_t> memory(64);
  const uint64_t id = export_table::add(memory.data(), memory.size(), access::rdma_write);
  std::mutex m;
  std::condition_variable cv;
  bool held = false;
  std::atomic<bool> released{false};

  std::thread holder([&] {
    export_table::claim claim;
    ASSERT_EQ(export_table::acquire(process_token(), id, 0, 64, access::rdma_write, claim),
              status::success);
    {
      std::lock_guard lock(m);
      held = true;
    }
    cv.notify_all();
    // Long enough that a remove() that does not wait would return first; not a timing assertion.
    std::this_thread::sleep_for(50ms);
    claim.data()[0] = 0x11;  // still allowed: the claim is live
    released = true;
    claim.reset();
  });
  {
    std::unique_lock lock(m);
    ASSERT_TRUE(cv.wait_for(lock, bound, [&] { return held; }));
  }
  export_table::remove(id);
  EXPECT_TRUE(released.load()) << "remove() returned while a claim was still held";
  holder.join();
  export_table::claim claim;
  EXPECT_EQ(export_table::acquire(process_token(), id, 0, 1, access::rdma_write, claim),
            status::not_found);
}

TEST(export_table, no_claim_is_live_after_remove_returns) {
  std::vector<uint8_t> memory(64);
  const uint64_t id = export_table::add(memory.data(), memory.size(), access::rdma_write);
  std::atomic<bool> removed{false};
  std::atomic<int> claims{0}, late{0};
  std::mutex m;
  std::condition_variable cv;
  constexpr int warm_up = 100;
  constexpr int max_rounds = 2'000'000;

  auto worker = [&] {
    for (int i = 0; i < max_rounds; ++i) {
      export_table::claim claim;
      status s = export_table::acquire(process_token(), id, 0, 64, access::rdma_write, claim);
      if (s == status::not_found) return;
      ASSERT_EQ(s, status::success);
      // remove() waits for claims, so none can be live once it has returned.
      if (removed.load()) ++late;
      claim.data()[1] = 1;
      if (++claims == warm_up) {
        std::lock_guard lock(m);
        cv.notify_all();
      }
    }
  };
  std::thread a(worker), b(worker);
  {
    std::unique_lock lock(m);
    cv.wait_for(lock, bound, [&] { return claims.load() >= warm_up; });
  }
  export_table::remove(id);
  removed = true;
  a.join();
  b.join();
  EXPECT_EQ(late.load(), 0);
}

TEST(export_table, full_table_throws_full) {
  std::vector<uint8_t> memory(8);
  std::vector<uint64_t> ids;
  constexpr size_t more_than_the_table = 100'000;
  status thrown = status::success;
  try {
    while (ids.size() < more_than_the_table)
      ids.push_back(export_table::add(memory.data(), memory.size(), access::rdma_read));
  } catch (const status_error& e) {
    thrown = e.code();
  }
  EXPECT_EQ(thrown, status::full);
  EXPECT_GT(ids.size(), 0u);
  for (uint64_t id : ids) export_table::remove(id);
  // Room again once the entries are gone.
  const uint64_t id = export_table::add(memory.data(), memory.size(), access::rdma_read);
  export_table::remove(id);
}

}  // namespace
}  // namespace zc::core
