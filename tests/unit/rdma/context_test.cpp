#include "rdma/context.hpp"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "rdma_fixture.hpp"

namespace zc::rdma::testing {
namespace {

using namespace std::chrono_literals;

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

TEST_P(rdma_pair, connects_and_runs) {
  connect();
  EXPECT_EQ(a.thread.call([&] { return a.ctx->state(); }), core::context_state::running);
  EXPECT_EQ(b.thread.call([&] { return b.ctx->state(); }), core::context_state::running);
}

TEST_P(rdma_pair, sends_arrive_in_order_with_their_bytes) {
  connect();
  // Small messages and a 64 KiB one (rendezvous), interleaved: order must hold across both.
  const std::vector<size_t> sizes = {64, 1, 4096, 65536, 64, 300, 65536, 8};
  b.thread.call([&] {
    for (size_t i = 0; i < sizes.size(); ++i) {
      b.submit<receive_task>(
          i, [&](receive_task& t) { t.set_dst(*b.local_buffer(i * 65536, 65536, false)); });
    }
  });
  a.thread.call([&] {
    size_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto bytes = pattern(sizes[i], static_cast<uint8_t>(i));
      std::memcpy(a.region() + offset, bytes.data(), bytes.size());
      a.submit<send_task>(
          i, [&](send_task& t) { t.set_src(*a.local_buffer(offset, sizes[i], true)); });
      offset += sizes[i];
    }
  });
  ASSERT_TRUE(b.wait_for("receive", sizes.size()));
  ASSERT_TRUE(a.wait_for("send", sizes.size()));
  auto received = b.completions("receive");
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto& t = static_cast<receive_task&>(*received[i].task);
    ASSERT_EQ(received[i].result, status::success);
    EXPECT_EQ(t.get_user_data().u64, i) << "receive completions out of order";
    EXPECT_EQ(t.received_length(), sizes[i]);
    auto expected = pattern(sizes[i], static_cast<uint8_t>(i));
    EXPECT_EQ(std::memcmp(t.dst().data(), expected.data(), sizes[i]), 0) << "message " << i;
    EXPECT_FALSE(t.has_immediate());
  }
  for (auto& c : a.completions("send")) EXPECT_EQ(c.result, status::success);
}

TEST_P(rdma_pair, send_with_immediate_delivers_the_value) {
  connect();
  b.thread.call([&] {
    b.submit<receive_task>(0, [&](receive_task& t) { t.set_dst(*b.local_buffer(0, 128, false)); });
  });
  a.thread.call([&] {
    a.submit<send_imm_task>(0, [&](send_imm_task& t) {
      t.set_src(*a.local_buffer(0, 16, true));
      t.set_immediate_data(0xC0FFEE);
    });
  });
  ASSERT_TRUE(b.wait_for("receive", 1));
  ASSERT_TRUE(a.wait_for("send_imm", 1));
  auto r = b.completions("receive");
  auto& t = static_cast<receive_task&>(*r[0].task);
  EXPECT_EQ(r[0].result, status::success);
  EXPECT_TRUE(t.has_immediate());
  EXPECT_EQ(t.immediate_data(), 0xC0FFEEu);
  EXPECT_EQ(a.completions("send_imm")[0].result, status::success);
}

TEST_P(rdma_pair, send_without_posted_receive_fails_with_empty) {
  connect();
  a.thread.call([&] {
    a.submit<send_task>(0, [&](send_task& t) { t.set_src(*a.local_buffer(0, 64, true)); });
  });
  ASSERT_TRUE(a.wait_for("send", 1));
  EXPECT_EQ(a.completions("send")[0].result, status::empty);
}

TEST_P(rdma_pair, message_longer_than_posted_buffer_fails_both_sides) {
  connect();
  b.thread.call([&] {
    b.submit<receive_task>(0, [&](receive_task& t) { t.set_dst(*b.local_buffer(0, 32, false)); });
  });
  const auto before = std::vector<uint8_t>(b.region(), b.region() + 32);
  a.thread.call([&] {
    a.submit<send_task>(0, [&](send_task& t) { t.set_src(*a.local_buffer(4096, 64, true)); });
  });
  ASSERT_TRUE(a.wait_for("send", 1));
  ASSERT_TRUE(b.wait_for("receive", 1));
  EXPECT_EQ(a.completions("send")[0].result, status::too_big);
  EXPECT_EQ(b.completions("receive")[0].result, status::too_big);
  EXPECT_EQ(std::memcmp(b.region(), before.data(), 32), 0) << "an oversize message wrote data";
}

class read_write_sizes : public rdma_pair {};

TEST_P(rdma_pair, read_copies_remote_bytes_4k_and_64k) {
  connect();
  for (size_t size : {size_t(4096), size_t(65536)}) {
    a.thread.call([&] {
      read_task* t = nullptr;
      ASSERT_EQ(a.ctx->allocate(core::make_user_data(size), t), status::success);
      std::memset(a.region() + 131072, 0, size);
      t->set(*a.remote_buffer(*a.remote, 1000, size), *a.local_buffer(131072, size, false));
      ASSERT_EQ(a.ctx->submit(*t), status::success);
    });
    ASSERT_TRUE(a.wait_for("read", size == 4096 ? 1 : 2));
    auto c = a.completions("read").back();
    ASSERT_EQ(c.result, status::success);
    auto& t = static_cast<read_task&>(*c.task);
    EXPECT_EQ(t.dst().data_length(), size);
    EXPECT_EQ(std::memcmp(a.region() + 131072, b.region() + 1000, size), 0);
  }
}

TEST_P(rdma_pair, write_places_bytes_before_completing) {
  connect();
  for (size_t size : {size_t(4096), size_t(65536)}) {
    auto bytes = pattern(size, static_cast<uint8_t>(size));
    a.thread.call([&] {
      std::memcpy(a.region(), bytes.data(), size);
      a.submit<write_task>(size, [&](write_task& t) {
        t.set(*a.local_buffer(0, size, true), *a.remote_target(*a.remote, 8192, size));
      });
    });
    ASSERT_TRUE(a.wait_for("write", size == 4096 ? 1 : 2));
    ASSERT_EQ(a.completions("write").back().result, status::success);
    // Completion means the bytes are at the destination: check them on the owner's thread.
    EXPECT_TRUE(b.thread.call([&] { return std::memcmp(b.region() + 8192, bytes.data(), size); }) ==
                0);
  }
  EXPECT_TRUE(b.guards_intact());
}

TEST_P(rdma_pair, write_with_immediate_completes_peer_receive_after_the_data) {
  connect();
  b.thread.call([&] {
    b.submit<receive_task>(0,
                           [&](receive_task& t) { t.set_dst(*b.local_buffer(200000, 64, false)); });
  });
  auto bytes = pattern(65536, 3);
  a.thread.call([&] {
    std::memcpy(a.region(), bytes.data(), bytes.size());
    a.submit<write_imm_task>(0, [&](write_imm_task& t) {
      t.set(*a.local_buffer(0, bytes.size(), true), *a.remote_target(*a.remote, 0, bytes.size()));
      t.set_immediate_data(77);
    });
  });
  ASSERT_TRUE(b.wait_for("receive", 1));
  bool data_in_place =
      b.thread.call([&] { return std::memcmp(b.region(), bytes.data(), bytes.size()) == 0; });
  EXPECT_TRUE(data_in_place);
  auto r = b.completions("receive")[0];
  EXPECT_EQ(r.result, status::success);
  EXPECT_EQ(static_cast<receive_task&>(*r.task).immediate_data(), 77u);
  ASSERT_TRUE(a.wait_for("write_imm", 1));
  EXPECT_EQ(a.completions("write_imm")[0].result, status::success);
}

TEST_P(rdma_pair, write_with_immediate_without_posted_receive_writes_nothing) {
  connect();
  const auto before = std::vector<uint8_t>(b.region(), b.region() + 4096);
  a.thread.call([&] {
    std::memset(a.region(), 0x5A, 4096);
    a.submit<write_imm_task>(0, [&](write_imm_task& t) {
      t.set(*a.local_buffer(0, 4096, true), *a.remote_target(*a.remote, 0, 4096));
    });
  });
  ASSERT_TRUE(a.wait_for("write_imm", 1));
  EXPECT_EQ(a.completions("write_imm")[0].result, status::empty);
  EXPECT_EQ(std::memcmp(b.region(), before.data(), 4096), 0);
}

TEST_P(rdma_pair, atomics_compare_swap_and_fetch_add) {
  connect();
  b.thread.call([&] { std::memcpy(b.region() + 64, "\x05\0\0\0\0\0\0\0", 8); });
  a.thread.call([&] {
    a.submit<atomic_cmp_swp_task>(1, [&](atomic_cmp_swp_task& hit) {
      hit.set(*a.remote_buffer(*a.remote, 64, 8), *a.local_buffer(0, 8, false), 5, 9);
    });
  });
  ASSERT_TRUE(a.wait_for("cmp_swp", 1));
  a.thread.call([&] {
    a.submit<atomic_cmp_swp_task>(2, [&](atomic_cmp_swp_task& miss) {
      miss.set(*a.remote_buffer(*a.remote, 64, 8), *a.local_buffer(8, 8, false), 5, 100);
    });
    a.submit<atomic_fetch_add_task>(3, [&](atomic_fetch_add_task& add) {
      add.set(*a.remote_buffer(*a.remote, 64, 8), *a.local_buffer(16, 8, false), 10);
    });
  });
  ASSERT_TRUE(a.wait_for("cmp_swp", 2));
  ASSERT_TRUE(a.wait_for("fetch_add", 1));
  uint64_t old_hit, old_miss, old_add, now;
  std::memcpy(&old_hit, a.region(), 8);
  std::memcpy(&old_miss, a.region() + 8, 8);
  std::memcpy(&old_add, a.region() + 16, 8);
  std::memcpy(&now, b.region() + 64, 8);
  EXPECT_EQ(old_hit, 5u);   // matched: swapped to 9
  EXPECT_EQ(old_miss, 9u);  // did not match 5: unchanged
  EXPECT_EQ(old_add, 9u);
  EXPECT_EQ(now, 19u);
}

TEST_P(rdma_pair, misaligned_atomic_is_refused) {
  connect();
  a.thread.call([&] {
    a.submit<atomic_fetch_add_task>(0, [&](atomic_fetch_add_task& add) {
      add.set(*a.remote_buffer(*a.remote, 3, 8), *a.local_buffer(0, 8, false), 1);
    });
  });
  ASSERT_TRUE(a.wait_for("fetch_add", 1));
  EXPECT_EQ(a.completions("fetch_add")[0].result, status::invalid_value);
}

TEST_P(rdma_pair, remote_sync_event_get_set_add) {
  connect();
  auto blob = b.thread.call([&] {
    b.event->set(41);
    return b.event->export_remote();
  });
  std::unique_ptr<core::memory_map> event;
  a.thread.call([&] {
    event = core::memory_map::import_rdma(blob);
    a.submit<sync_event_get_task>(
        0, [&](sync_event_get_task& get) { get.set(*event, *a.local_buffer(0, 8, false)); });
  });
  ASSERT_TRUE(a.wait_for("event_get", 1));
  uint64_t got = 0;
  std::memcpy(&got, a.region(), 8);
  EXPECT_EQ(got, 41u);
  a.thread.call([&] {
    uint64_t v = 100;
    std::memcpy(a.region() + 8, &v, 8);
    a.submit<sync_event_set_task>(
        0, [&](sync_event_set_task& set) { set.set(*event, *a.local_buffer(8, 8, true)); });
  });
  ASSERT_TRUE(a.wait_for("event_set", 1));
  EXPECT_EQ(b.thread.call([&] { return b.event->value(); }), 100u);
  a.thread.call([&] {
    a.submit<sync_event_add_task>(
        0, [&](sync_event_add_task& add) { add.set(*event, *a.local_buffer(16, 8, false), 5); });
  });
  ASSERT_TRUE(a.wait_for("event_add", 1));
  std::memcpy(&got, a.region() + 16, 8);
  EXPECT_EQ(got, 100u);
  EXPECT_EQ(b.thread.call([&] { return b.event->value(); }), 105u);
  for (auto kind : {"event_get", "event_set", "event_add"})
    EXPECT_EQ(a.completions(kind)[0].result, status::success) << kind;
  a.thread.call([&] { event.reset(); });
}

// --- A peer asking for what the owner does not allow -------------------------------------------

TEST_P(rdma_pair, write_outside_map_is_refused_and_touches_nothing) {
  connect();
  // Claim a region longer than the real one, reaching into the guard after it.
  auto forged_blob = a.thread.call(
      [&] { return forged_export(*a.remote, 0, region_size + 2 * guard_size, core::rdma_all); });
  auto before = b.backing;
  std::unique_ptr<core::memory_map> forged;
  a.thread.call([&] {
    forged = core::memory_map::import_rdma(forged_blob);
    std::memset(a.region(), 0x11, 8192);
    for (size_t offset : {region_size - 100, region_size, region_size + guard_size - 4096}) {
      a.submit<write_task>(offset, [&](write_task& t) {
        t.set(*a.local_buffer(0, 4096, true), *a.remote_target(*forged, offset, 4096));
      });
    }
    a.submit<read_task>(0, [&](read_task& r) {
      r.set(*a.remote_buffer(*forged, region_size - 32, 64), *a.local_buffer(4096, 64, false));
    });
  });
  ASSERT_TRUE(a.wait_for("write", 3));
  ASSERT_TRUE(a.wait_for("read", 1));
  for (auto& c : a.completions("write")) EXPECT_EQ(c.result, status::invalid_value);
  EXPECT_EQ(a.completions("read")[0].result, status::invalid_value);
  EXPECT_TRUE(b.thread.call([&] { return b.backing == before; })) << "memory changed";
  a.thread.call([&] { forged.reset(); });
}

TEST_P(rdma_pair, wrong_export_key_is_refused_and_touches_nothing) {
  connect();
  auto before = b.backing;
  std::unique_ptr<core::memory_map> forged;
  a.thread.call([&] {
    core::remote_region r = a.remote->remote();
    r.key ^= 1;  // the right id, range and permissions; only the key is off
    forged = core::memory_map::import_rdma(export_blob(r));
    std::memset(a.region(), 0x11, 4096);
    a.submit<write_task>(0, [&](write_task& t) {
      t.set(*a.local_buffer(0, 4096, true), *a.remote_target(*forged, 0, 4096));
    });
    a.submit<read_task>(0, [&](read_task& t) {
      t.set(*a.remote_buffer(*forged, 0, 64), *a.local_buffer(4096, 64, false));
    });
    a.submit<atomic_fetch_add_task>(0, [&](atomic_fetch_add_task& t) {
      t.set(*a.remote_buffer(*forged, 0, 8), *a.local_buffer(8192, 8, false), 1);
    });
  });
  ASSERT_TRUE(a.wait_for("write", 1));
  ASSERT_TRUE(a.wait_for("read", 1));
  ASSERT_TRUE(a.wait_for("fetch_add", 1));
  EXPECT_EQ(a.completions("write")[0].result, status::not_permitted);
  EXPECT_EQ(a.completions("read")[0].result, status::not_permitted);
  EXPECT_EQ(a.completions("fetch_add")[0].result, status::not_permitted);
  EXPECT_TRUE(b.thread.call([&] { return b.backing == before; })) << "memory changed";
  a.thread.call([&] { forged.reset(); });
}

// A peer given one export (the region) must not reach another export of the same process (the
// sync event) by naming its id: ids are predictable, keys are not.
TEST_P(rdma_pair, blob_naming_another_export_is_refused) {
  connect();
  auto event_blob = b.thread.call([&] { return b.event->export_remote(); });
  std::unique_ptr<core::memory_map> forged;
  a.thread.call([&] {
    auto event = core::memory_map::import_rdma(event_blob);
    core::remote_region r = a.remote->remote();  // keeps the region's key
    r.export_id = event->remote().export_id;
    r.base = event->remote().base;
    r.length = sizeof(uint64_t);
    forged = core::memory_map::import_rdma(export_blob(r));
    a.submit<atomic_fetch_add_task>(0, [&](atomic_fetch_add_task& f) {
      f.set(*a.remote_buffer(*forged, 0, 8), *a.local_buffer(0, 8, false), 1);
    });
  });
  ASSERT_TRUE(a.wait_for("fetch_add", 1));
  EXPECT_EQ(a.completions("fetch_add")[0].result, status::not_permitted);
  EXPECT_EQ(b.thread.call([&] { return b.event->value(); }), 0u);
  a.thread.call([&] { forged.reset(); });
}

TEST_P(rdma_pair, access_without_permission_is_refused) {
  connect();
  // The owner's export is read-only; the peer pretends it may write.
  auto ro_blob = b.thread.call([&] {
    b.local = core::memory_map::wrap(b.region(), region_size,
                                     core::access::local_read_write | core::access::rdma_read);
    return b.local->export_rdma();
  });
  auto before = b.backing;
  std::unique_ptr<core::memory_map> forged;
  a.thread.call([&] {
    auto honest = core::memory_map::import_rdma(ro_blob);
    forged = core::memory_map::import_rdma(forged_export(*honest, 0, region_size, core::rdma_all));
    a.submit<write_task>(0, [&](write_task& w) {
      w.set(*a.local_buffer(0, 4096, true), *a.remote_target(*forged, 0, 4096));
    });
    a.submit<atomic_fetch_add_task>(0, [&](atomic_fetch_add_task& f) {
      f.set(*a.remote_buffer(*forged, 0, 8), *a.local_buffer(0, 8, false), 1);
    });
    // The honest import says read-only: refused before anything is sent.
    write_task* w2 = nullptr;
    ASSERT_EQ(a.ctx->allocate(core::make_user_data(0), w2), status::success);
    w2->set(*a.local_buffer(0, 16, true), *a.remote_target(*honest, 0, 16));
    EXPECT_EQ(a.ctx->submit(*w2), status::not_permitted);
    w2->free();
  });
  ASSERT_TRUE(a.wait_for("write", 1));
  ASSERT_TRUE(a.wait_for("fetch_add", 1));
  EXPECT_EQ(a.completions("write")[0].result, status::not_permitted);
  EXPECT_EQ(a.completions("fetch_add")[0].result, status::not_permitted);
  EXPECT_TRUE(b.thread.call([&] { return b.backing == before; }));
  a.thread.call([&] { forged.reset(); });
}

TEST_P(rdma_pair, context_permissions_limit_the_peer) {
  connect(core::rdma_all, core::access::rdma_read);  // b lets its peer read only
  auto before = b.backing;
  a.thread.call([&] {
    a.submit<write_task>(0, [&](write_task& w) {
      w.set(*a.local_buffer(0, 64, true), *a.remote_target(*a.remote, 0, 64));
    });
    a.submit<read_task>(0, [&](read_task& r) {
      r.set(*a.remote_buffer(*a.remote, 0, 64), *a.local_buffer(4096, 64, false));
    });
  });
  ASSERT_TRUE(a.wait_for("write", 1));
  ASSERT_TRUE(a.wait_for("read", 1));
  EXPECT_EQ(a.completions("write")[0].result, status::not_permitted);
  EXPECT_EQ(a.completions("read")[0].result, status::success);
  EXPECT_TRUE(b.thread.call([&] { return b.backing == before; }));
}

TEST_P(rdma_pair, access_after_withdrawal_is_refused) {
  connect();
  b.thread.call([&] { b.local->withdraw_rdma_export(); });
  auto before = b.backing;
  a.thread.call([&] {
    a.submit<write_task>(0, [&](write_task& w) {
      w.set(*a.local_buffer(0, 64, true), *a.remote_target(*a.remote, 0, 64));
    });
  });
  ASSERT_TRUE(a.wait_for("write", 1));
  EXPECT_EQ(a.completions("write")[0].result, status::not_found);
  EXPECT_TRUE(b.thread.call([&] { return b.backing == before; }));
}

// --- Lifecycle ------------------------------------------------------------------------------

TEST_P(rdma_pair, slow_peer_times_tasks_out) {
  connect();
  // b's thread is made busy for longer than the 3 s task timeout before a asks it anything.
  std::promise<void> stalled;
  std::thread stall([&] {
    b.thread.call(
        [&] {
          stalled.set_value();
          std::this_thread::sleep_for(4s);
        },
        10s);
  });
  stalled.get_future().wait();
  a.thread.call([&] {
    a.submit<read_task>(0, [&](read_task& r) {
      r.set(*a.remote_buffer(*a.remote, 0, 64), *a.local_buffer(0, 64, false));
    });
  });
  EXPECT_TRUE(a.wait_for("read", 1, 8s));
  stall.join();
  EXPECT_EQ(a.completions("read")[0].result, status::time_out);
}

TEST_P(rdma_pair, stop_fails_in_flight_tasks_and_reaches_idle) {
  connect();
  b.thread.call([&] {
    for (int i = 0; i < 4; ++i) {
      b.submit<receive_task>(
          i, [&](receive_task& t) { t.set_dst(*b.local_buffer(i * 64, 64, false)); });
    }
    EXPECT_EQ(b.ctx->stop(), status::success);
  });
  ASSERT_TRUE(b.wait_for("receive", 4));
  for (auto& c : b.completions("receive")) EXPECT_EQ(c.result, status::shutdown);
  EXPECT_TRUE(b.thread.wait_until([&] { return b.ctx->state() == core::context_state::idle; }, 5s));
}

TEST_P(rdma_pair, peer_destroyed_takes_context_out_of_running) {
  connect();
  a.thread.call([&] {
    a.submit<receive_task>(0, [&](receive_task& t) { t.set_dst(*a.local_buffer(0, 64, false)); });
  });
  b.destroy();
  // Over tcp the reset is seen at once, over shared memory at the next keepalive (~1 s).
  EXPECT_TRUE(
      a.thread.wait_until([&] { return a.ctx->state() != core::context_state::running; }, 10s));
  ASSERT_TRUE(a.wait_for("receive", 1));
  EXPECT_NE(a.completions("receive")[0].result, status::success);
}

TEST_P(rdma_pair, submit_outside_running_is_bad_state) {
  a.create(GetParam(), core::rdma_all);
  a.thread.call([&] {
    send_task* t = nullptr;
    ASSERT_EQ(a.ctx->allocate(core::make_user_data(0), t), status::success);
    t->set_src(*a.local_buffer(0, 8, true));
    EXPECT_EQ(a.ctx->submit(*t), status::bad_state);
    t->free();
  });
}

TEST_P(rdma_pair, pool_exhaustion_reports_no_memory) {
  a.create(GetParam(), core::rdma_all);
  a.thread.call([&] {
    std::vector<send_task*> taken;
    send_task* t = nullptr;
    while (a.ctx->allocate(core::make_user_data(0), t) == status::success) taken.push_back(t);
    EXPECT_EQ(taken.size(), 16u);
    EXPECT_EQ(a.ctx->allocate(core::make_user_data(0), t), status::no_memory);
    for (auto* x : taken) x->free();
  });
}

INSTANTIATE_TEST_SUITE_P(transports, rdma_pair, ::testing::Values("tcp", "sm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace zc::rdma::testing
