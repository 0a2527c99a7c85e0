// A sync event is a 64-bit counter in an RDMA-exported map: local set/add/value, and an export that
// a peer imports as a remote memory map with read, write and atomic access.
#include "core/sync_event.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "core/blob.hpp"
#include "core/export_table.hpp"

namespace zc::core {
namespace {

TEST(sync_event, starts_at_its_initial_value) {
  EXPECT_EQ(sync_event().value(), 0u);
  EXPECT_EQ(sync_event(41).value(), 41u);
}

TEST(sync_event, set_and_add) {
  sync_event ev(5);
  ev.set(100);
  EXPECT_EQ(ev.value(), 100u);
  EXPECT_EQ(ev.add(7), 100u);  // returns the value before the add
  EXPECT_EQ(ev.value(), 107u);
  ev.set(UINT64_MAX);
  EXPECT_EQ(ev.add(2), UINT64_MAX);
  EXPECT_EQ(ev.value(), 1u);  // wraps like a 64-bit counter
}

TEST(sync_event, concurrent_adds_are_not_lost) {
  sync_event ev;
  constexpr int threads = 4;
  constexpr int adds_each = 10'000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < adds_each; ++i) ev.add(1);
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(ev.value(), uint64_t{threads} * adds_each);
}

TEST(sync_event, map_covers_the_counter_with_every_rdma_access) {
  sync_event ev(9);
  memory_map& map = ev.map();
  EXPECT_EQ(map.size(), sizeof(uint64_t));
  EXPECT_TRUE(has(map.permissions(), rdma_all));
  EXPECT_EQ(*reinterpret_cast<const uint64_t*>(map.data()), 9u);
}

TEST(sync_event, export_remote_is_an_rdma_memory_blob_for_import_rdma) {
  sync_event ev(3);
  const auto blob = ev.export_remote();
  std::span<const uint8_t> payload;
  EXPECT_EQ(parse_blob(blob, blob_kind::rdma_memory, payload), status::success);

  auto remote = memory_map::import_rdma(blob);
  EXPECT_TRUE(remote->is_remote());
  EXPECT_EQ(remote->remote().owner_token, process_token());
  EXPECT_EQ(remote->remote().length, sizeof(uint64_t));
  EXPECT_EQ(remote->remote().base, reinterpret_cast<uintptr_t>(ev.map().data()));
  EXPECT_TRUE(has(remote->remote().permissions, rdma_all));
}

TEST(sync_event, peer_access_through_the_export_reaches_the_counter) {
  sync_event ev(3);
  auto remote = memory_map::import_rdma(ev.export_remote());
  const remote_region& r = remote->remote();
  export_table::claim claim;
  ASSERT_EQ(
      export_table::acquire(r.export_id, r.key, 0, sizeof(uint64_t), access::rdma_atomic, claim),
      status::success);
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(claim.data())).fetch_add(10);
  claim.reset();
  EXPECT_EQ(ev.value(), 13u);
  EXPECT_EQ(
      export_table::acquire(r.export_id, r.key, 1, sizeof(uint64_t), access::rdma_read, claim),
      status::invalid_value);
}

// A peer's atomic in progress when the event is destroyed still lands on valid memory: the
// counter is memory the map owns, freed when the last claim goes.
TEST(sync_event, destroyed_event_keeps_its_counter_while_a_claim_lives) {
  auto ev = std::make_unique<sync_event>(7);
  auto remote = memory_map::import_rdma(ev->export_remote());
  const remote_region& r = remote->remote();
  export_table::claim claim;
  ASSERT_EQ(
      export_table::acquire(r.export_id, r.key, 0, sizeof(uint64_t), access::rdma_atomic, claim),
      status::success);
  ev.reset();
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(claim.data()));
  EXPECT_EQ(word.fetch_add(1), 7u);
  claim.reset();
}

TEST(sync_event, destroyed_event_is_no_longer_reachable) {
  std::unique_ptr<memory_map> remote;
  {
    sync_event ev;
    remote = memory_map::import_rdma(ev.export_remote());
  }
  const remote_region& r = remote->remote();
  export_table::claim claim;
  EXPECT_EQ(
      export_table::acquire(r.export_id, r.key, 0, sizeof(uint64_t), access::rdma_read, claim),
      status::not_found);
}

}  // namespace
}  // namespace zc::core
