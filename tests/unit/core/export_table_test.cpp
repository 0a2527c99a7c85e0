// The process-wide RDMA export table: what a peer's request may touch (id, key, range,
// permission); that each export has its own key; and the lifetime rules: a withdrawal takes
// effect at once and never waits, the slot drains, and the release action runs exactly once,
// when the last claim goes, never while a claim is live.
#include "core/export_table.hpp"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace zc::core {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t region_size = 256;
constexpr uint64_t max_u64 = std::numeric_limits<uint64_t>::max();
constexpr auto bound = 10s;
// Far below the old bounded wait (5 s) that remove() used to sit out with a claim live.
constexpr auto at_once = 1s;

uint32_t slot_of(uint64_t id) {
  return static_cast<uint32_t>(id & 0xFFFFFFFFu);
}

// One export, removed at the end of the test.
class export_table_test : public testing::Test {
 protected:
  void SetUp() override {
    e = export_table::add(memory.data(), memory.size(), access::rdma_read | access::rdma_write);
  }
  void TearDown() override {
    claim.reset();
    export_table::remove(e.id);
  }

  status acquire(uint64_t offset, uint64_t length, access needed = access::rdma_read) {
    return export_table::acquire(e.id, e.key, offset, length, needed, claim);
  }

  std::vector<uint8_t> memory = std::vector<uint8_t>(region_size);
  export_table::entry e{};
  export_table::claim claim;
};

TEST_F(export_table_test, ids_and_keys_are_never_zero) {
  EXPECT_NE(e.id, 0u);
  EXPECT_NE(e.key, 0u);
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
  const auto ro = export_table::add(read_only.data(), read_only.size(), access::rdma_read);
  EXPECT_EQ(export_table::acquire(ro.id, ro.key, 0, 8, access::rdma_write, claim),
            status::not_permitted);
  EXPECT_EQ(export_table::acquire(ro.id, ro.key, 0, 8, access::rdma_read, claim), status::success);
  claim.reset();
  export_table::remove(ro.id);
}

TEST_F(export_table_test, wrong_key_is_not_permitted_even_with_the_right_id) {
  std::vector<uint8_t> other_memory(64);
  const auto other = export_table::add(other_memory.data(), other_memory.size(), rdma_all);
  for (uint64_t key : std::initializer_list<uint64_t>{
           e.key + 1, e.key ^ 0x8000000000000000ull, ~e.key, uint64_t{0},
           other.key,  // another export's key: keys do not carry across exports
           process_token()}) {
    EXPECT_EQ(export_table::acquire(e.id, key, 0, 8, access::rdma_read, claim),
              status::not_permitted)
        << std::hex << key;
    EXPECT_FALSE(claim);
  }
  // The key is checked first: a wrong key learns nothing about range or permission.
  EXPECT_EQ(export_table::acquire(e.id, e.key + 1, 0, region_size + 1, access::rdma_atomic, claim),
            status::not_permitted);
  EXPECT_EQ(acquire(0, 8), status::success);
  claim.reset();
  export_table::remove(other.id);
}

TEST(export_table, every_export_gets_its_own_key) {
  std::vector<uint8_t> memory(64);
  std::vector<export_table::entry> entries;
  std::set<uint64_t> keys, ids;
  constexpr int count = 256;
  for (int i = 0; i < count; ++i) {
    entries.push_back(export_table::add(memory.data(), memory.size(), access::rdma_read));
    keys.insert(entries.back().key);
    ids.insert(entries.back().id);
    EXPECT_NE(entries.back().key, 0u);
    EXPECT_NE(entries.back().key, entries.back().id);
  }
  EXPECT_EQ(keys.size(), size_t{count});
  EXPECT_EQ(ids.size(), size_t{count});
  // The same region exported again (after a withdrawal) gets a new key as well.
  for (auto& entry : entries) export_table::remove(entry.id);
  const auto again = export_table::add(memory.data(), memory.size(), access::rdma_read);
  EXPECT_EQ(keys.count(again.key), 0u);
  export_table::remove(again.id);
}

TEST_F(export_table_test, unknown_ids_are_not_found) {
  const uint64_t slot = e.id & 0xFFFFFFFFu;
  const uint64_t generation = e.id >> 32;
  for (uint64_t bogus : {uint64_t{0}, (generation << 32) | 0xFFFFFFFFu,
                         ((generation + 1) << 32) | slot,     // even generation: never live
                         ((generation + 2) << 32) | slot}) {  // a later generation
    EXPECT_EQ(export_table::acquire(bogus, e.key, 0, 8, access::rdma_read, claim),
              status::not_found)
        << std::hex << bogus;
    EXPECT_FALSE(claim);
  }
}

TEST_F(export_table_test, withdrawn_export_is_not_found) {
  export_table::remove(e.id);
  EXPECT_EQ(acquire(0, 8), status::not_found);
  EXPECT_FALSE(claim);
}

TEST_F(export_table_test, old_id_stays_dead_when_its_slot_is_reused) {
  export_table::remove(e.id);
  const auto old = e;
  // add() moves on through the table; go round until the old slot comes back.
  std::vector<uint8_t> other(8);
  for (int n = 0; n < 100'000; ++n) {
    e = export_table::add(memory.data(), memory.size(), access::rdma_read);
    if (slot_of(e.id) == slot_of(old.id)) break;
    export_table::remove(e.id);
  }
  ASSERT_EQ(slot_of(e.id), slot_of(old.id));
  EXPECT_NE(e.id, old.id);
  EXPECT_NE(e.key, old.key);
  EXPECT_EQ(export_table::acquire(old.id, old.key, 0, 8, access::rdma_read, claim),
            status::not_found);
  EXPECT_EQ(export_table::acquire(old.id, e.key, 0, 8, access::rdma_read, claim),
            status::not_found);
  EXPECT_EQ(acquire(0, 8), status::success);
}

TEST_F(export_table_test, removing_twice_or_an_unknown_id_is_harmless) {
  export_table::remove(e.id);
  export_table::remove(e.id);
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

// ---- lifetime: withdraw at once, release when drained ------------------------------------------

// An export whose release action counts its runs (and notes the thread it ran on).
struct counted_export {
  std::vector<uint8_t> memory = std::vector<uint8_t>(64);
  std::atomic<int> released{0};
  std::atomic<std::thread::id> released_on{};
  export_table::entry e{};

  counted_export() {
    e = export_table::add(memory.data(), memory.size(), access::rdma_read | access::rdma_write,
                          [this] {
                            released_on = std::this_thread::get_id();
                            ++released;
                          });
  }
  ~counted_export() { export_table::remove(e.id); }  // harmless when already withdrawn
  status acquire(export_table::claim& c) {
    return export_table::acquire(e.id, e.key, 0, memory.size(), access::rdma_write, c);
  }
};

TEST(export_table, release_runs_inside_remove_when_no_claim_is_live) {
  counted_export x;
  EXPECT_EQ(x.released.load(), 0);
  export_table::remove(x.e.id);
  EXPECT_EQ(x.released.load(), 1);
  EXPECT_EQ(x.released_on.load(), std::this_thread::get_id());
  export_table::remove(x.e.id);
  EXPECT_EQ(x.released.load(), 1);
}

TEST(export_table, remove_with_a_live_claim_returns_at_once_and_release_waits_for_the_claim) {
  counted_export x;
  export_table::claim claim;
  ASSERT_EQ(x.acquire(claim), status::success);

  const auto start = std::chrono::steady_clock::now();
  export_table::remove(x.e.id);
  EXPECT_LT(std::chrono::steady_clock::now() - start, at_once) << "remove() waited for a claim";

  // Withdrawn: nothing new gets in, whatever the key.
  export_table::claim late;
  EXPECT_EQ(x.acquire(late), status::not_found);
  EXPECT_EQ(export_table::acquire(x.e.id, x.e.key + 1, 0, 8, access::rdma_write, late),
            status::not_found);
  EXPECT_FALSE(late);
  // Draining: the claim is still good and the release has not run.
  EXPECT_TRUE(claim);
  claim.data()[0] = 0x11;
  EXPECT_EQ(x.released.load(), 0);

  claim.reset();
  EXPECT_EQ(x.released.load(), 1);
  claim.reset();
  export_table::remove(x.e.id);
  EXPECT_EQ(x.released.load(), 1);
  EXPECT_EQ(x.memory[0], 0x11);
}

TEST(export_table, release_runs_once_after_the_last_of_several_claims) {
  counted_export x;
  export_table::claim a, b, c;
  ASSERT_EQ(x.acquire(a), status::success);
  ASSERT_EQ(x.acquire(b), status::success);
  export_table::remove(x.e.id);
  EXPECT_EQ(x.acquire(c), status::not_found);
  b.reset();
  EXPECT_EQ(x.released.load(), 0);
  export_table::claim moved(std::move(a));
  EXPECT_EQ(x.released.load(), 0);
  moved.reset();
  EXPECT_EQ(x.released.load(), 1);
}

TEST(export_table, release_runs_on_the_thread_that_drops_the_last_claim) {
  counted_export x;
  std::mutex m;
  std::condition_variable cv;
  bool held = false, removed = false;
  std::thread::id holder_id;

  std::thread holder([&] {
    export_table::claim claim;
    ASSERT_EQ(x.acquire(claim), status::success);
    std::unique_lock lock(m);
    held = true;
    cv.notify_all();
    ASSERT_TRUE(cv.wait_for(lock, bound, [&] { return removed; }));
    claim.data()[1] = 0x22;  // withdrawn, but the claim still holds the memory
    claim.reset();
  });
  holder_id = holder.get_id();
  {
    std::unique_lock lock(m);
    ASSERT_TRUE(cv.wait_for(lock, bound, [&] { return held; }));
  }
  const auto start = std::chrono::steady_clock::now();
  export_table::remove(x.e.id);
  EXPECT_LT(std::chrono::steady_clock::now() - start, at_once);
  EXPECT_EQ(x.released.load(), 0);
  {
    std::lock_guard lock(m);
    removed = true;
  }
  cv.notify_all();
  holder.join();
  EXPECT_EQ(x.released.load(), 1);
  EXPECT_EQ(x.released_on.load(), holder_id);
  EXPECT_EQ(x.memory[1], 0x22);
}

TEST(export_table, draining_slot_is_not_reused_and_its_late_release_touches_no_other_export) {
  counted_export old_export;
  export_table::claim old_claim;
  ASSERT_EQ(old_export.acquire(old_claim), status::success);
  export_table::remove(old_export.e.id);

  // Another export made while the old one drains gets another slot.
  counted_export next;
  EXPECT_NE(slot_of(next.e.id), slot_of(old_export.e.id));
  export_table::claim next_claim;
  ASSERT_EQ(next.acquire(next_claim), status::success);

  // The old claim's release finishes the old export only.
  old_claim.reset();
  EXPECT_EQ(old_export.released.load(), 1);
  EXPECT_EQ(next.released.load(), 0);
  // The new export still counts exactly its own claim: withdrawing it waits for that one.
  export_table::remove(next.e.id);
  EXPECT_EQ(next.released.load(), 0);
  next_claim.reset();
  EXPECT_EQ(next.released.load(), 1);
}

TEST(export_table, full_table_never_hands_out_a_draining_slot) {
  counted_export draining;
  export_table::claim claim;
  ASSERT_EQ(draining.acquire(claim), status::success);
  export_table::remove(draining.e.id);

  std::vector<uint8_t> memory(8);
  std::vector<uint64_t> ids;
  status thrown = status::success;
  try {
    while (ids.size() < 100'000) {
      ids.push_back(export_table::add(memory.data(), memory.size(), access::rdma_read).id);
      ASSERT_NE(slot_of(ids.back()), slot_of(draining.e.id)) << "draining slot reused";
    }
  } catch (const status_error& err) {
    thrown = err.code();
  }
  EXPECT_EQ(thrown, status::full);
  // Drained: its slot, and only it, is free again.
  claim.reset();
  EXPECT_EQ(draining.released.load(), 1);
  const uint64_t reused = export_table::add(memory.data(), memory.size(), access::rdma_read).id;
  EXPECT_EQ(slot_of(reused), slot_of(draining.e.id));
  EXPECT_NE(reused, draining.e.id);
  export_table::remove(reused);
  for (uint64_t id : ids) export_table::remove(id);
}

TEST(export_table, no_acquire_succeeds_after_remove_returns) {
  std::vector<uint8_t> memory(64);
  const auto e = export_table::add(memory.data(), memory.size(), access::rdma_write);
  std::atomic<bool> removed{false};
  std::atomic<int> claims{0}, late{0};
  std::mutex m;
  std::condition_variable cv;
  constexpr int warm_up = 100;
  constexpr int max_rounds = 2'000'000;

  auto worker = [&] {
    for (int i = 0; i < max_rounds; ++i) {
      const bool after = removed.load();
      export_table::claim claim;
      status s = export_table::acquire(e.id, e.key, 0, 64, access::rdma_write, claim);
      if (s == status::not_found) return;
      ASSERT_EQ(s, status::success);
      if (after) ++late;  // began after remove() returned, and still got in
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
  export_table::remove(e.id);
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
      ids.push_back(export_table::add(memory.data(), memory.size(), access::rdma_read).id);
  } catch (const status_error& e) {
    thrown = e.code();
  }
  EXPECT_EQ(thrown, status::full);
  EXPECT_GT(ids.size(), 0u);
  for (uint64_t id : ids) export_table::remove(id);
  // Room again once the entries are gone.
  const uint64_t id = export_table::add(memory.data(), memory.size(), access::rdma_read).id;
  export_table::remove(id);
}

// ---- concurrent stress -------------------------------------------------------------------------

// Engine threads acquire, write and release (holding some claims across iterations, so many are
// released after their export was withdrawn) while the control thread withdraws and re-adds
// exports. Each export's memory is a heap block that its release action frees: a claim that
// outlived its memory is a use after free (ASan), and it would also see its record marked
// released. At the end every export must have been released exactly once.
TEST(export_table, concurrent_acquire_release_with_add_remove_is_safe) {
  struct record {
    uint8_t* memory = nullptr;  // [record* | payload]; freed by the release action
    std::atomic<int> released{0};
    export_table::entry e{};
  };
  constexpr size_t block = 64;
  constexpr int exports = 8;
  constexpr int engines = 3;
  constexpr auto run_for = 1500ms;
  constexpr long max_rounds = 100'000;  // bounds the records kept for the final check

  std::vector<std::unique_ptr<record>> records;  // control thread only, until joined
  std::array<std::atomic<uint64_t>, exports> ids{}, keys{};
  std::atomic<bool> stop{false};
  std::atomic<long> acquired{0}, refused{0}, violations{0}, released_by_engines{0};
  const std::thread::id control = std::this_thread::get_id();

  auto make = [&](int k) {
    auto r = std::make_unique<record>();
    r->memory = new uint8_t[block]();
    record* raw = r.get();
    std::memcpy(r->memory, &raw, sizeof(raw));
    r->e = export_table::add(r->memory, block, access::rdma_write,
                             [raw, &released_by_engines, control] {
                               if (raw->released.fetch_add(1) != 0) std::abort();  // ran twice
                               if (std::this_thread::get_id() != control) ++released_by_engines;
                               delete[] raw->memory;
                             });
    keys[k].store(r->e.key);
    ids[k].store(r->e.id);
    records.push_back(std::move(r));
  };
  for (int k = 0; k < exports; ++k) make(k);

  auto engine = [&](unsigned seed) {
    std::mt19937_64 rng(seed);
    std::vector<export_table::claim> held(4);
    while (!stop.load(std::memory_order_relaxed)) {
      const int k = static_cast<int>(rng() % exports);
      uint64_t key = keys[k].load(), id = ids[k].load();  // may mix two generations: refused
      if (rng() % 16 == 0) key ^= 1;                      // a wrong key now and then
      export_table::claim c;
      const status s = export_table::acquire(id, key, sizeof(record*), block - sizeof(record*),
                                             access::rdma_write, c);
      if (!ok(s)) {
        if (s != status::not_found && s != status::not_permitted) ++violations;
        ++refused;
        continue;
      }
      ++acquired;
      record* r = nullptr;
      std::memcpy(&r, c.data() - sizeof(record*), sizeof(r));
      c.data()[rng() % (block - sizeof(record*))] = static_cast<uint8_t>(seed);
      if (r->released.load() != 0) ++violations;  // memory released under a live claim
      // Keep some claims a while; the one replaced is released, often after a withdrawal.
      held[rng() % held.size()] = std::move(c);
      if (rng() % 64 == 0) std::this_thread::yield();
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < engines; ++i) threads.emplace_back(engine, 1234u + i);

  std::mt19937_64 rng(99);
  const auto deadline = std::chrono::steady_clock::now() + run_for;
  long rounds = 0;
  while (std::chrono::steady_clock::now() < deadline && rounds < max_rounds) {
    const int k = static_cast<int>(rng() % exports);
    export_table::remove(ids[k].load());
    make(k);
    ++rounds;
    if (rounds % 32 == 0) std::this_thread::yield();
  }
  stop = true;
  for (auto& t : threads) t.join();  // their held claims are released here
  for (int k = 0; k < exports; ++k) export_table::remove(ids[k].load());

  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(acquired.load(), 0);
  EXPECT_GT(rounds, 0);
  EXPECT_GT(released_by_engines.load(), 0) << "no export drained after its withdrawal";
  for (auto& r : records) EXPECT_EQ(r->released.load(), 1) << std::hex << r->e.id;
  RecordProperty("rounds", std::to_string(rounds));
  RecordProperty("acquired", std::to_string(acquired.load()));
  RecordProperty("released_by_engines", std::to_string(released_by_engines.load()));
}

}  // namespace
}  // namespace zc::core
