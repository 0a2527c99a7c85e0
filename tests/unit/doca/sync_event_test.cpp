// doca_sync_event.h as a DOCA program sees it: the CPU handle's get, set, add and waits; the
// configuration rules; export to a network peer and the checks on a peer's blob; and a peer's
// get, notify_set and notify_add through doca_rdma's remote_net_sync_event tasks, between two
// rdma contexts of this process over sm and tcp.
#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_mmap.h>
#include <doca_pe.h>
#include <doca_rdma.h>
#include <doca_sync_event.h>
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/allocation_counter.hpp"
#include "unit/doca/two_engines.hpp"

namespace {

constexpr uint64_t all_bits = ~uint64_t{0};

using zc::doca::testing::count_completed;
using zc::doca::testing::count_failed;
using zc::doca::testing::open_device;

// A started event with a CPU subscriber and a remote_net publisher, as a DOCA program makes one
// for a peer to update.
doca_sync_event* started_event(doca_dev* dev) {
  doca_sync_event* event = nullptr;
  EXPECT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_add_publisher_location_remote_net(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_add_subscriber_location_cpu(event, dev), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_start(event), DOCA_SUCCESS);
  return event;
}

std::vector<uint8_t> export_of(doca_sync_event* event) {
  const uint8_t* data = nullptr;
  size_t size = 0;
  EXPECT_EQ(doca_sync_event_export_to_remote_net(event, &data, &size), DOCA_SUCCESS);
  return {data, data + size};
}

uint64_t value_of(doca_sync_event* event) {
  uint64_t v = 0;
  EXPECT_EQ(doca_sync_event_get(event, &v), DOCA_SUCCESS);
  return v;
}

TEST(doca_sync_event, cpu_get_set_and_add_are_exact) {
  doca_dev* dev = open_device("sm");
  ASSERT_NE(dev, nullptr);
  doca_sync_event* event = nullptr;
  ASSERT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_add_publisher_location_cpu(event, dev), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_add_subscriber_location_cpu(event, dev), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_start(event), DOCA_SUCCESS);
  EXPECT_EQ(value_of(event), 0u);  // a new event starts at 0

  ASSERT_EQ(doca_sync_event_update_set(event, 0x1122334455667788), DOCA_SUCCESS);
  EXPECT_EQ(value_of(event), 0x1122334455667788u);
  uint64_t fetched = 0;
  ASSERT_EQ(doca_sync_event_update_add(event, 0x10, &fetched), DOCA_SUCCESS);
  EXPECT_EQ(fetched, 0x1122334455667788u);  // the value before the add
  EXPECT_EQ(value_of(event), 0x1122334455667798u);
  // The counter is 64 bits and wraps as one.
  ASSERT_EQ(doca_sync_event_update_set(event, all_bits), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_update_add(event, 2, &fetched), DOCA_SUCCESS);
  EXPECT_EQ(fetched, all_bits);
  EXPECT_EQ(value_of(event), 1u);

  EXPECT_EQ(doca_sync_event_get(event, nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_sync_event_update_add(event, 1, nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_sync_event_get(nullptr, &fetched), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_dev_close(dev), DOCA_SUCCESS);
}

TEST(doca_sync_event, waits_return_once_the_masked_value_satisfies_them) {
  doca_sync_event* event = nullptr;
  ASSERT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_start(event), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_update_set(event, 0x0500), DOCA_SUCCESS);
  // Already true: each returns at once. The mask applies to the counter before comparing.
  EXPECT_EQ(doca_sync_event_wait_gt(event, 0x04ff, all_bits), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_wait_eq(event, 0x0500, all_bits), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_wait_eq(event, 0x0500, 0xff00), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_wait_neq(event, 0, 0x0f00), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_wait_eq_yield(event, 0, 0x00ff), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_wait_gt_yield(event, 0, 0xff00), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_wait_neq_yield(event, 0x0400, all_bits), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_wait_gt(nullptr, 0, all_bits), DOCA_ERROR_INVALID_VALUE);

  // Not yet true: the waiter returns only after another thread's update makes it so.
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    EXPECT_EQ(doca_sync_event_wait_gt_yield(event, 0x0600, 0xff00), DOCA_SUCCESS);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  uint64_t fetched = 0;
  ASSERT_EQ(doca_sync_event_update_add(event, 0x00ff, &fetched), DOCA_SUCCESS);  // 0x05ff
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned) << "returned while (0x05ff & 0xff00) <= 0x0600";
  ASSERT_EQ(doca_sync_event_update_set(event, 0x0701), DOCA_SUCCESS);
  waiter.join();
  EXPECT_TRUE(returned);
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
}

TEST(doca_sync_event, configuration_is_refused_once_started) {
  doca_dev* dev = open_device("sm");
  ASSERT_NE(dev, nullptr);
  doca_sync_event* event = nullptr;
  ASSERT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_add_publisher_location_cpu(event, nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_sync_event_stop(event), DOCA_ERROR_BAD_STATE);  // not started
  ASSERT_EQ(doca_sync_event_start(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_start(event), DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_sync_event_add_publisher_location_cpu(event, dev), DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_sync_event_add_publisher_location_remote_net(event), DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_sync_event_add_subscriber_location_cpu(event, dev), DOCA_ERROR_BAD_STATE);
  uint64_t word = 0;
  EXPECT_EQ(doca_sync_event_set_addr(event, &word), DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_sync_event_stop(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_add_publisher_location_remote_net(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_create(nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_sync_event_destroy(nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_dev_close(dev), DOCA_SUCCESS);
}

TEST(doca_sync_event, set_addr_keeps_the_counter_in_program_memory) {
  alignas(8) uint64_t words[2] = {7, 0};
  doca_sync_event* event = nullptr;
  ASSERT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_set_addr(event, nullptr), DOCA_ERROR_INVALID_VALUE);
  auto* misaligned = reinterpret_cast<uint64_t*>(reinterpret_cast<uint8_t*>(words) + 4);
  EXPECT_EQ(doca_sync_event_set_addr(event, misaligned), DOCA_ERROR_INVALID_VALUE);
  ASSERT_EQ(doca_sync_event_set_addr(event, &words[0]), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_start(event), DOCA_SUCCESS);
  EXPECT_EQ(value_of(event), 7u);
  uint64_t fetched = 0;
  ASSERT_EQ(doca_sync_event_update_add(event, 5, &fetched), DOCA_SUCCESS);
  EXPECT_EQ(fetched, 7u);
  EXPECT_EQ(words[0], 12u);
  EXPECT_EQ(words[1], 0u);
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
}

TEST(doca_sync_event, export_needs_a_started_event_with_a_remote_net_publisher) {
  doca_dev* dev = open_device("sm");
  ASSERT_NE(dev, nullptr);
  const uint8_t* data = nullptr;
  size_t size = 0;
  doca_sync_event* event = nullptr;
  ASSERT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_add_publisher_location_cpu(event, dev), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_export_to_remote_net(event, &data, &size), DOCA_ERROR_BAD_STATE);
  ASSERT_EQ(doca_sync_event_start(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_export_to_remote_net(event, &data, &size), DOCA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(doca_sync_event_export_to_remote_net(event, nullptr, &size), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);

  event = started_event(dev);
  auto first = export_of(event);
  EXPECT_FALSE(first.empty());
  EXPECT_EQ(export_of(event), first);  // the same blob while started
  ASSERT_EQ(doca_sync_event_stop(event), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_start(event), DOCA_SUCCESS);
  EXPECT_NE(export_of(event), first);  // stopping ended that export; this is a new one
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_dev_close(dev), DOCA_SUCCESS);
}

TEST(doca_sync_event, remote_handles_are_made_only_from_a_sync_event_export) {
  doca_dev* dev = open_device("sm");
  ASSERT_NE(dev, nullptr);
  doca_sync_event* event = started_event(dev);
  auto blob = export_of(event);
  doca_sync_event_remote_net* remote = nullptr;
  ASSERT_EQ(doca_sync_event_remote_net_create_from_export(dev, blob.data(), blob.size(), &remote),
            DOCA_SUCCESS);
  ASSERT_NE(remote, nullptr);
  EXPECT_EQ(doca_sync_event_remote_net_destroy(remote), DOCA_SUCCESS);

  doca_sync_event_remote_net* rejected = nullptr;
  EXPECT_EQ(
      doca_sync_event_remote_net_create_from_export(dev, blob.data(), blob.size() / 2, &rejected),
      DOCA_ERROR_INVALID_VALUE);  // cut short
  auto flipped = blob;
  flipped[flipped.size() - 1] ^= 0x5a;
  EXPECT_EQ(
      doca_sync_event_remote_net_create_from_export(dev, flipped.data(), flipped.size(), &rejected),
      DOCA_ERROR_INVALID_VALUE);  // checksum
  EXPECT_EQ(doca_sync_event_remote_net_create_from_export(dev, nullptr, blob.size(), &rejected),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(
      doca_sync_event_remote_net_create_from_export(nullptr, blob.data(), blob.size(), &rejected),
      DOCA_ERROR_INVALID_VALUE);

  // An mmap's RDMA export is framed as an event's, but it is not an event: refused.
  std::vector<uint8_t> memory(4096);
  doca_mmap* map = nullptr;
  ASSERT_EQ(doca_mmap_create(&map), DOCA_SUCCESS);
  ASSERT_EQ(doca_mmap_set_memrange(map, memory.data(), memory.size()), DOCA_SUCCESS);
  ASSERT_EQ(doca_mmap_set_permissions(
                map, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
                         DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_mmap_start(map), DOCA_SUCCESS);
  const void* map_blob = nullptr;
  size_t map_blob_len = 0;
  ASSERT_EQ(doca_mmap_export_rdma(map, dev, &map_blob, &map_blob_len), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_remote_net_create_from_export(
                dev, static_cast<const uint8_t*>(map_blob), map_blob_len, &rejected),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(rejected, nullptr);
  EXPECT_EQ(doca_mmap_destroy(map), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_dev_close(dev), DOCA_SUCCESS);
}

TEST(doca_sync_event, capabilities_and_unsupported_functions_say_so) {
  doca_dev* dev = open_device("sm");
  ASSERT_NE(dev, nullptr);
  const doca_devinfo* info = doca_dev_as_devinfo(dev);
  EXPECT_EQ(doca_sync_event_cap_is_export_to_remote_net_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_cap_remote_net_is_create_from_export_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_rdma_cap_task_remote_net_sync_event_get_is_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_rdma_cap_task_remote_net_sync_event_notify_set_is_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_rdma_cap_task_remote_net_sync_event_notify_add_is_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_cap_is_export_to_remote_pci_supported(info), DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(doca_sync_event_cap_is_create_from_export_supported(info), DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(doca_sync_event_cap_is_export_to_dpa_supported(info), DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(doca_sync_event_cap_is_export_to_gpu_supported(info), DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(doca_sync_event_cap_task_get_is_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_cap_task_notify_set_is_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_cap_task_notify_add_is_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_cap_task_wait_eq_is_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_cap_task_wait_neq_is_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_cap_is_export_to_remote_net_supported(nullptr),
            DOCA_ERROR_INVALID_VALUE);

  doca_sync_event* event = nullptr;
  ASSERT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_add_publisher_location_remote_pci(event), DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(doca_sync_event_add_subscriber_location_gpu(event, nullptr), DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(doca_sync_event_set_doca_buf(event, nullptr), DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(doca_sync_event_add_publisher_location_dpa(event, nullptr), DOCA_ERROR_NOT_SUPPORTED);
  const uint8_t* data = nullptr;
  size_t size = 0;
  EXPECT_EQ(doca_sync_event_export_to_remote_pci(event, dev, &data, &size),
            DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_dev_close(dev), DOCA_SUCCESS);
}

// ---- The event as a DOCA context: tasks complete from doca_pe_progress.

struct context_counts {
  int completed = 0;
  int failed = 0;
  doca_error_t last_error = DOCA_SUCCESS;
  bool running = false;
  bool idle = false;
};

void on_context_state(const union doca_data user_data, struct doca_ctx*, enum doca_ctx_states,
                      enum doca_ctx_states next) {
  auto* counts = static_cast<context_counts*>(user_data.ptr);
  counts->running = next == DOCA_CTX_STATE_RUNNING;
  counts->idle = next == DOCA_CTX_STATE_IDLE;
}

using se_get = doca_sync_event_task_get;
using se_set = doca_sync_event_task_notify_set;
using se_add = doca_sync_event_task_notify_add;
using se_eq = doca_sync_event_task_wait_eq;
using se_neq = doca_sync_event_task_wait_neq;
constexpr auto se_get_task = doca_sync_event_task_get_as_doca_task;
constexpr auto se_set_task = doca_sync_event_task_notify_set_as_doca_task;
constexpr auto se_add_task = doca_sync_event_task_notify_add_as_doca_task;
constexpr auto se_eq_task = doca_sync_event_task_wait_eq_as_doca_task;
constexpr auto se_neq_task = doca_sync_event_task_wait_neq_as_doca_task;

TEST(doca_sync_event_ctx, tasks_complete_from_progress_and_waits_when_satisfied) {
  context_counts counts;
  doca_sync_event* event = nullptr;
  ASSERT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
  ASSERT_EQ(
      doca_sync_event_task_get_set_conf(event, count_completed<context_counts, se_get, se_get_task>,
                                        count_failed<context_counts, se_get, se_get_task>, 2),
      DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_task_notify_set_set_conf(
                event, count_completed<context_counts, se_set, se_set_task>,
                count_failed<context_counts, se_set, se_set_task>, 2),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_task_notify_add_set_conf(
                event, count_completed<context_counts, se_add, se_add_task>,
                count_failed<context_counts, se_add, se_add_task>, 2),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_task_wait_eq_set_conf(
                event, count_completed<context_counts, se_eq, se_eq_task>,
                count_failed<context_counts, se_eq, se_eq_task>, 1),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_task_wait_neq_set_conf(
                event, count_completed<context_counts, se_neq, se_neq_task>,
                count_failed<context_counts, se_neq, se_neq_task>, 1),
            DOCA_SUCCESS);
  doca_ctx* ctx = doca_sync_event_as_ctx(event);
  ASSERT_NE(ctx, nullptr);
  doca_pe* pe = nullptr;
  ASSERT_EQ(doca_pe_create(&pe), DOCA_SUCCESS);
  ASSERT_EQ(doca_ctx_set_user_data(ctx, doca_data{.ptr = &counts}), DOCA_SUCCESS);
  ASSERT_EQ(doca_ctx_set_state_changed_cb(ctx, on_context_state), DOCA_SUCCESS);
  uint64_t got = 0;
  se_get* get = nullptr;
  EXPECT_EQ(doca_sync_event_task_get_alloc_init(event, &got, doca_data{}, &get),
            DOCA_ERROR_BAD_STATE);  // not started
  ASSERT_EQ(doca_pe_connect_ctx(pe, ctx), DOCA_SUCCESS);
  ASSERT_EQ(doca_ctx_start(ctx), DOCA_SUCCESS);
  doca_pe_progress(pe);
  ASSERT_TRUE(counts.running);
  EXPECT_EQ(doca_sync_event_start(event), DOCA_ERROR_BAD_STATE);    // a context now
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_ERROR_BAD_STATE);  // running

  ASSERT_EQ(doca_sync_event_update_set(event, 33), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_task_get_alloc_init(event, &got, doca_data{}, &get), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_task_get_get_ret_val_ptr(get), &got);
  ASSERT_EQ(doca_task_submit(se_get_task(get)), DOCA_SUCCESS);
  EXPECT_EQ(counts.completed, 0);  // callbacks run from progress only
  doca_pe_progress(pe);
  EXPECT_EQ(counts.completed, 1);
  EXPECT_EQ(got, 33u);

  se_set* set = nullptr;
  ASSERT_EQ(doca_sync_event_task_notify_set_alloc_init(event, 100, doca_data{}, &set),
            DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_task_notify_set_get_set_val(set), 100u);
  ASSERT_EQ(doca_task_submit(se_set_task(set)), DOCA_SUCCESS);
  uint64_t fetched = 0;
  se_add* add = nullptr;
  ASSERT_EQ(doca_sync_event_task_notify_add_alloc_init(event, 5, &fetched, doca_data{}, &add),
            DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_task_notify_add_get_inc_val(add), 5u);
  ASSERT_EQ(doca_task_submit(se_add_task(add)), DOCA_SUCCESS);
  doca_pe_progress(pe);
  EXPECT_EQ(counts.completed, 3);
  EXPECT_EQ(fetched, 100u);
  EXPECT_EQ(value_of(event), 105u);

  // Waits complete from the progress call that finds them satisfied, not before.
  se_eq* eq = nullptr;
  ASSERT_EQ(doca_sync_event_task_wait_eq_alloc_init(event, 0x200, 0xff00, doca_data{}, &eq),
            DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_task_wait_eq_get_mask(eq), 0xff00u);
  ASSERT_EQ(doca_task_submit(se_eq_task(eq)), DOCA_SUCCESS);
  se_eq* second = nullptr;
  EXPECT_EQ(doca_sync_event_task_wait_eq_alloc_init(event, 1, all_bits, doca_data{}, &second),
            DOCA_ERROR_NO_MEMORY);  // a pool of one
  se_neq* neq = nullptr;
  ASSERT_EQ(doca_sync_event_task_wait_neq_alloc_init(event, 105, all_bits, doca_data{}, &neq),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_task_submit(se_neq_task(neq)), DOCA_SUCCESS);
  for (int i = 0; i < 10; ++i) doca_pe_progress(pe);
  EXPECT_EQ(counts.completed, 3);
  size_t inflight = 0;
  EXPECT_EQ(doca_ctx_get_num_inflight_tasks(ctx, &inflight), DOCA_SUCCESS);
  EXPECT_EQ(inflight, 2u);
  ASSERT_EQ(doca_sync_event_update_set(event, 0x2ff), DOCA_SUCCESS);  // both hold now
  doca_pe_progress(pe);
  EXPECT_EQ(counts.completed, 5);
  EXPECT_EQ(counts.failed, 0);

  // A wait still pending at stop comes back through its error callback.
  ASSERT_EQ(doca_sync_event_task_wait_eq_alloc_init(event, 7, all_bits, doca_data{}, &eq),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_task_submit(se_eq_task(eq)), DOCA_SUCCESS);
  doca_ctx_stop(ctx);
  for (int i = 0; i < 100 && !counts.idle; ++i) doca_pe_progress(pe);
  EXPECT_TRUE(counts.idle);
  EXPECT_EQ(counts.failed, 1);
  EXPECT_NE(counts.last_error, DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_pe_destroy(pe), DOCA_SUCCESS);
}

TEST(doca_sync_event_ctx, a_stand_alone_event_is_no_context) {
  doca_sync_event* event = nullptr;
  ASSERT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_start(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_as_ctx(event), nullptr);
  EXPECT_EQ(
      doca_sync_event_task_get_set_conf(event, count_completed<context_counts, se_get, se_get_task>,
                                        count_failed<context_counts, se_get, se_get_task>, 1),
      DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
}

// ---- Event mode: a program that sleeps on the notification handle while a wait task is pending.

constexpr auto update_delay = std::chrono::milliseconds(50);
constexpr int sleep_limit_ms = 2000;  // far longer than update_delay: a wake-up is readiness

// An event run as a context on its own engine, with one wait_eq task, running and quiet.
struct wait_context {
  context_counts counts;
  doca_sync_event* event = nullptr;
  doca_pe* pe = nullptr;
  doca_ctx* ctx = nullptr;

  void start() {
    ASSERT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
    ASSERT_EQ(doca_sync_event_task_wait_eq_set_conf(
                  event, count_completed<context_counts, se_eq, se_eq_task>,
                  count_failed<context_counts, se_eq, se_eq_task>, 1),
              DOCA_SUCCESS);
    ctx = doca_sync_event_as_ctx(event);
    ASSERT_EQ(doca_pe_create(&pe), DOCA_SUCCESS);
    ASSERT_EQ(doca_ctx_set_user_data(ctx, doca_data{.ptr = &counts}), DOCA_SUCCESS);
    ASSERT_EQ(doca_ctx_set_state_changed_cb(ctx, on_context_state), DOCA_SUCCESS);
    ASSERT_EQ(doca_pe_connect_ctx(pe, ctx), DOCA_SUCCESS);
    ASSERT_EQ(doca_ctx_start(ctx), DOCA_SUCCESS);
    for (int i = 0; i < 10; ++i) doca_pe_progress(pe);
    ASSERT_TRUE(counts.running);
  }

  void submit_wait(uint64_t value) {
    se_eq* eq = nullptr;
    ASSERT_EQ(doca_sync_event_task_wait_eq_alloc_init(event, value, all_bits, doca_data{}, &eq),
              DOCA_SUCCESS);
    ASSERT_EQ(doca_task_submit(se_eq_task(eq)), DOCA_SUCCESS);
  }

  // epoll_wait on the notification handle, at most sleep_limit_ms: 1 when it turned readable.
  int sleep_on_handle() {
    doca_notification_handle_t handle{};
    EXPECT_EQ(doca_pe_get_notification_handle(pe, &handle), DOCA_SUCCESS);
    const int ep = epoll_create1(0);
    epoll_event e{};
    e.events = EPOLLIN;
    EXPECT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, handle, &e), 0);
    const int n = epoll_wait(ep, &e, 1, sleep_limit_ms);
    close(ep);
    EXPECT_EQ(doca_pe_clear_notification(pe, handle), DOCA_SUCCESS);
    return n;
  }

  void stop() {
    doca_ctx_stop(ctx);
    for (int i = 0; i < 100 && !counts.idle; ++i) doca_pe_progress(pe);
    EXPECT_TRUE(counts.idle);
    EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
    EXPECT_EQ(doca_pe_destroy(pe), DOCA_SUCCESS);
  }
};

// The review's p1: the program arms with a wait task pending, then sleeps; another thread's CPU
// update satisfies the wait. The handle must not let it sleep through that.
TEST(doca_sync_event_ctx, a_pending_wait_task_keeps_the_notification_handle_awake) {
  wait_context w;
  ASSERT_NO_FATAL_FAILURE(w.start());
  ASSERT_NO_FATAL_FAILURE(w.submit_wait(7));
  for (int i = 0; i < 10; ++i) doca_pe_progress(w.pe);
  ASSERT_EQ(w.counts.completed, 0);
  ASSERT_EQ(doca_pe_request_notification(w.pe), DOCA_SUCCESS);
  std::thread updater([&] {
    std::this_thread::sleep_for(update_delay);
    EXPECT_EQ(doca_sync_event_update_set(w.event, 7), DOCA_SUCCESS);
  });
  const int woke = w.sleep_on_handle();
  updater.join();
  EXPECT_EQ(woke, 1) << "slept the whole limit with a wait task pending";
  doca_pe_progress(w.pe);  // the one progress call after the wake-up completes the wait
  EXPECT_EQ(w.counts.completed, 1);
  w.stop();
}

// A program that armed before it submitted the wait (from a callback, say) sleeps on the handle:
// the CPU update that satisfies the wait wakes it.
TEST(doca_sync_event_ctx, a_cpu_update_wakes_an_engine_with_a_wait_task_pending) {
  wait_context w;
  ASSERT_NO_FATAL_FAILURE(w.start());
  ASSERT_EQ(doca_pe_request_notification(w.pe), DOCA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(w.submit_wait(7));
  std::thread updater([&] {
    std::this_thread::sleep_for(update_delay);
    EXPECT_EQ(doca_sync_event_update_set(w.event, 7), DOCA_SUCCESS);
  });
  const int woke = w.sleep_on_handle();
  updater.join();
  EXPECT_EQ(woke, 1) << "the update that satisfied the wait task did not wake the engine";
  doca_pe_progress(w.pe);
  EXPECT_EQ(w.counts.completed, 1);
  w.stop();
}

// Submitting a wait task is the data path: it allocates nothing (the pending list is sized for
// every configured wait task when the context is made).
TEST(doca_sync_event_ctx, submitting_a_wait_task_allocates_nothing) {
  wait_context w;
  ASSERT_NO_FATAL_FAILURE(w.start());
  se_eq* eq = nullptr;
  ASSERT_EQ(doca_sync_event_task_wait_eq_alloc_init(w.event, 7, all_bits, doca_data{}, &eq),
            DOCA_SUCCESS);
  const uint64_t before = zc::test::allocations_on_this_thread();
  const doca_error_t submitted = doca_task_submit(se_eq_task(eq));
  const uint64_t after = zc::test::allocations_on_this_thread();
  ASSERT_EQ(submitted, DOCA_SUCCESS);
  EXPECT_EQ(after, before);
  w.stop();  // the pending wait comes back through its error callback
}

// An event run as a context whose wait_eq callback stops it and destroys it, as a program that is
// done once its wait held might; what each call answered.
struct destroy_in_wait {
  doca_sync_event* event = nullptr;
  int completed = 0;
  int failed = 0;
  bool idle = false;
  doca_error_t stop_result = DOCA_ERROR_UNKNOWN;
  doca_error_t destroy_result = DOCA_ERROR_UNKNOWN;
};

void stop_and_destroy_on_wait(se_eq* task, doca_data, doca_data ctx_data) {
  auto* d = static_cast<destroy_in_wait*>(ctx_data.ptr);
  d->completed++;
  doca_task_free(se_eq_task(task));
  d->stop_result = doca_ctx_stop(doca_sync_event_as_ctx(d->event));
  d->destroy_result = doca_sync_event_destroy(d->event);
  if (d->destroy_result == DOCA_SUCCESS) d->event = nullptr;  // gone: not destroyed again
}

void count_wait_failed(se_eq* task, doca_data, doca_data ctx_data) {
  static_cast<destroy_in_wait*>(ctx_data.ptr)->failed++;
  doca_task_free(se_eq_task(task));
}

void on_destroy_in_wait_state(const union doca_data user_data, struct doca_ctx*,
                              enum doca_ctx_states, enum doca_ctx_states next) {
  static_cast<destroy_in_wait*>(user_data.ptr)->idle = next == DOCA_CTX_STATE_IDLE;
}

// The wait's callback stops the context (idle at once: nothing else is in flight), then destroys
// the event: that would free what the progress engine reads when the callback returns, so it is
// refused (IN_USE), as the Comch and rdma contexts refuse it. After doca_pe_progress() returned it
// succeeds.
TEST(doca_sync_event_ctx, an_event_destroyed_from_its_wait_callback_is_refused_in_use) {
  destroy_in_wait d;
  ASSERT_EQ(doca_sync_event_create(&d.event), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_task_wait_eq_set_conf(d.event, stop_and_destroy_on_wait,
                                                  count_wait_failed, 1),
            DOCA_SUCCESS);
  doca_ctx* ctx = doca_sync_event_as_ctx(d.event);
  doca_pe* pe = nullptr;
  ASSERT_EQ(doca_pe_create(&pe), DOCA_SUCCESS);
  ASSERT_EQ(doca_ctx_set_user_data(ctx, doca_data{.ptr = &d}), DOCA_SUCCESS);
  ASSERT_EQ(doca_ctx_set_state_changed_cb(ctx, on_destroy_in_wait_state), DOCA_SUCCESS);
  ASSERT_EQ(doca_pe_connect_ctx(pe, ctx), DOCA_SUCCESS);
  ASSERT_EQ(doca_ctx_start(ctx), DOCA_SUCCESS);
  se_eq* eq = nullptr;
  ASSERT_EQ(doca_sync_event_task_wait_eq_alloc_init(d.event, 1, all_bits, doca_data{}, &eq),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_task_submit(se_eq_task(eq)), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_update_set(d.event, 1), DOCA_SUCCESS);
  // The wait holds already: the first progress call finds it, the next runs its callback.
  for (int i = 0; i < 100 && d.completed == 0; ++i) doca_pe_progress(pe);
  ASSERT_EQ(d.completed, 1);
  EXPECT_EQ(d.failed, 0);
  EXPECT_EQ(d.stop_result, DOCA_SUCCESS);
  EXPECT_EQ(d.destroy_result, DOCA_ERROR_IN_USE);
  ASSERT_NE(d.event, nullptr);
  for (int i = 0; i < 100 && !d.idle; ++i) doca_pe_progress(pe);
  EXPECT_TRUE(d.idle);
  EXPECT_EQ(doca_sync_event_destroy(d.event), DOCA_SUCCESS);
  EXPECT_EQ(doca_pe_destroy(pe), DOCA_SUCCESS);
}

// ---- A CPU wait progresses no engine: it runs no callback of the program (one could destroy
// the event the wait reads) and leaves an engine to the thread that drives it.

// An exported event, which a CPU wait once treated as needing its engines progressed.
doca_sync_event* exported_event() {
  doca_sync_event* event = nullptr;
  EXPECT_EQ(doca_sync_event_create(&event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_add_publisher_location_remote_net(event), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_start(event), DOCA_SUCCESS);
  EXPECT_FALSE(export_of(event).empty());
  return event;
}

// `other` run as a context on `pe` with `num_tasks` get tasks reporting to `ctx_data`.
template <doca_sync_event_task_get_completion_cb_t on_done>
doca_pe* get_context(doca_sync_event* other, void* ctx_data, uint32_t num_tasks) {
  doca_pe* pe = nullptr;
  EXPECT_EQ(doca_pe_create(&pe), DOCA_SUCCESS);
  EXPECT_EQ(doca_sync_event_task_get_set_conf(other, on_done, on_done, num_tasks), DOCA_SUCCESS);
  doca_ctx* ctx = doca_sync_event_as_ctx(other);
  EXPECT_EQ(doca_ctx_set_user_data(ctx, doca_data{.ptr = ctx_data}), DOCA_SUCCESS);
  EXPECT_EQ(doca_pe_connect_ctx(pe, ctx), DOCA_SUCCESS);
  EXPECT_EQ(doca_ctx_start(ctx), DOCA_SUCCESS);
  return pe;
}

void stop_and_destroy(doca_sync_event* other, doca_pe* pe) {
  doca_ctx* ctx = doca_sync_event_as_ctx(other);
  doca_ctx_stop(ctx);
  for (int i = 0; i < 1000 && !zc::doca::testing::ctx_idle(ctx); ++i) doca_pe_progress(pe);
  EXPECT_TRUE(zc::doca::testing::ctx_idle(ctx));
  EXPECT_EQ(doca_sync_event_destroy(other), DOCA_SUCCESS);
  EXPECT_EQ(doca_pe_destroy(pe), DOCA_SUCCESS);
}

constexpr auto updater_delay = std::chrono::milliseconds(50);

// The review's p2: a get completes on an engine this thread drives while it waits on the CPU for
// an exported event; the callback (which could destroy the waited event) must not run inside.
TEST(doca_sync_event_cpu_wait, runs_no_callback_of_an_engine_its_thread_drives) {
  doca_sync_event* waited = exported_event();
  doca_sync_event* other = nullptr;
  ASSERT_EQ(doca_sync_event_create(&other), DOCA_SUCCESS);
  context_counts counts;
  doca_pe* pe =
      get_context<count_completed<context_counts, se_get, se_get_task>>(other, &counts, 1);
  doca_pe_progress(pe);  // this thread drives pe
  uint64_t got = 0;
  se_get* get = nullptr;
  ASSERT_EQ(doca_sync_event_task_get_alloc_init(other, &got, doca_data{}, &get), DOCA_SUCCESS);
  ASSERT_EQ(doca_task_submit(se_get_task(get)), DOCA_SUCCESS);

  std::thread updater([&] {
    std::this_thread::sleep_for(updater_delay);
    EXPECT_EQ(doca_sync_event_update_set(waited, 1), DOCA_SUCCESS);  // ends the wait below
  });
  EXPECT_EQ(doca_sync_event_wait_eq(waited, 1, all_bits), DOCA_SUCCESS);
  updater.join();
  EXPECT_EQ(counts.completed, 0) << "a completion callback ran inside doca_sync_event_wait_eq";
  doca_pe_progress(pe);
  EXPECT_EQ(counts.completed, 1);  // from progress, as always

  stop_and_destroy(other, pe);
  EXPECT_EQ(doca_sync_event_destroy(waited), DOCA_SUCCESS);
}

// The review's p3: main sets the engine up and hands it to a progress thread, then waits on the
// CPU. Every callback must run on the progress thread, never two at once. (Gets complete at once,
// so the progress thread resubmits between its progress calls: a callback that resubmitted would
// never let its progress call end.)
struct hand_off {
  doca_sync_event* other = nullptr;
  std::thread::id main;
  std::atomic<int> inside{0}, overlapping{0}, on_main{0}, on_progress_thread{0}, free_tasks{0};
  uint64_t value = 0;
};

void submit_free_gets(hand_off& h) {
  for (; h.free_tasks > 0; h.free_tasks--) {
    se_get* get = nullptr;
    ASSERT_EQ(doca_sync_event_task_get_alloc_init(h.other, &h.value, doca_data{}, &get),
              DOCA_SUCCESS);
    ASSERT_EQ(doca_task_submit(se_get_task(get)), DOCA_SUCCESS);
  }
}

constexpr auto callback_time = std::chrono::microseconds(10);

void hand_off_get_done(se_get* task, doca_data, doca_data ctx_data) {
  auto& h = *static_cast<hand_off*>(ctx_data.ptr);
  if (h.inside.fetch_add(1) != 0) h.overlapping++;
  (std::this_thread::get_id() == h.main ? h.on_main : h.on_progress_thread)++;
  std::this_thread::sleep_for(callback_time);  // makes overlapping callbacks likely, were any
  doca_task_free(se_get_task(task));
  h.free_tasks++;
  h.inside--;
}

TEST(doca_sync_event_cpu_wait, leaves_a_handed_off_engine_to_its_progress_thread) {
  constexpr int tasks = 4;
  constexpr int progress_calls = 2000;
  doca_sync_event* waited = exported_event();
  hand_off h;
  h.main = std::this_thread::get_id();
  h.free_tasks = tasks;
  ASSERT_EQ(doca_sync_event_create(&h.other), DOCA_SUCCESS);
  doca_pe* pe = get_context<hand_off_get_done>(h.other, &h, tasks);
  doca_pe_progress(pe);  // set up on main, as DOCA's samples do
  submit_free_gets(h);

  std::thread progress_thread([&] {  // from now on this thread drives pe
    std::this_thread::sleep_for(updater_delay);
    for (int i = 0; i < progress_calls; ++i) {
      doca_pe_progress(pe);
      submit_free_gets(h);
    }
    EXPECT_EQ(doca_sync_event_update_set(waited, 1), DOCA_SUCCESS);  // releases main
  });
  EXPECT_EQ(doca_sync_event_wait_gt(waited, 0, all_bits), DOCA_SUCCESS);
  progress_thread.join();
  EXPECT_EQ(h.on_main, 0) << "main progressed the engine it handed off, from its CPU wait";
  EXPECT_EQ(h.overlapping, 0);
  EXPECT_GT(h.on_progress_thread, 0);

  stop_and_destroy(h.other, pe);
  EXPECT_EQ(doca_sync_event_destroy(waited), DOCA_SUCCESS);
}

// ---- A peer's remote tasks: a owns no event, b exports one; both rdma contexts in this thread.

struct peer : zc::doca::testing::rdma_side {
  peer* other = nullptr;
  bool running = false;
  int completed = 0;
  int failed = 0;
  doca_error_t last_error = DOCA_SUCCESS;
};

void on_state(const union doca_data user_data, struct doca_ctx*, enum doca_ctx_states,
              enum doca_ctx_states next) {
  auto* p = static_cast<peer*>(user_data.ptr);
  if (next == DOCA_CTX_STATE_RUNNING) p->running = true;
  if (next == DOCA_CTX_STATE_IDLE) p->running = false;
  if (next == DOCA_CTX_STATE_STARTING) zc::doca::testing::export_and_connect(*p, *p->other);
}

using get_task = doca_rdma_task_remote_net_sync_event_get;
using set_task = doca_rdma_task_remote_net_sync_event_notify_set;
using add_task = doca_rdma_task_remote_net_sync_event_notify_add;
constexpr auto get_as_task = doca_rdma_task_remote_net_sync_event_get_as_task;
constexpr auto set_as_task = doca_rdma_task_remote_net_sync_event_notify_set_as_task;
constexpr auto add_as_task = doca_rdma_task_remote_net_sync_event_notify_add_as_task;

class doca_sync_event_remote : public ::testing::TestWithParam<const char*> {
 protected:
  // b's rdma grants these to a; a test may narrow them before start().
  uint32_t owner_permissions = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
                               DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC;

  void SetUp() override {
    for (peer* p : {&a, &b}) {
      ASSERT_NO_FATAL_FAILURE(p->open(GetParam()));
      ASSERT_EQ(doca_rdma_task_remote_net_sync_event_get_set_conf(
                    p->rdma, count_completed<peer, get_task, get_as_task>,
                    count_failed<peer, get_task, get_as_task>, 4),
                DOCA_SUCCESS);
      ASSERT_EQ(doca_rdma_task_remote_net_sync_event_notify_set_set_conf(
                    p->rdma, count_completed<peer, set_task, set_as_task>,
                    count_failed<peer, set_task, set_as_task>, 4),
                DOCA_SUCCESS);
      ASSERT_EQ(doca_rdma_task_remote_net_sync_event_notify_add_set_conf(
                    p->rdma, count_completed<peer, add_task, add_as_task>,
                    count_failed<peer, add_task, add_as_task>, 4),
                DOCA_SUCCESS);
      ASSERT_EQ(doca_ctx_set_state_changed_cb(p->ctx, on_state), DOCA_SUCCESS);
      ASSERT_EQ(doca_ctx_set_user_data(p->ctx, doca_data{.ptr = p}), DOCA_SUCCESS);
    }
    a.other = &b;
    b.other = &a;
    // a's local memory: the value a notify_set sends, and where get and add land.
    ASSERT_EQ(doca_mmap_create(&local_map), DOCA_SUCCESS);
    ASSERT_EQ(doca_mmap_set_memrange(local_map, local, sizeof(local)), DOCA_SUCCESS);
    ASSERT_EQ(doca_mmap_set_permissions(local_map, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE),
              DOCA_SUCCESS);
    ASSERT_EQ(doca_mmap_start(local_map), DOCA_SUCCESS);
    ASSERT_EQ(doca_buf_inventory_create(8, &inventory), DOCA_SUCCESS);
    ASSERT_EQ(doca_buf_inventory_start(inventory), DOCA_SUCCESS);
    event = started_event(b.dev);
  }

  void TearDown() override {
    if (remote != nullptr) {
      EXPECT_EQ(doca_sync_event_remote_net_destroy(remote), DOCA_SUCCESS);
    }
    for (peer* p : {&a, &b}) p->stop();
    progress_until([&] { return idle(a) && idle(b); });
    if (event != nullptr) {
      EXPECT_EQ(doca_sync_event_destroy(event), DOCA_SUCCESS);
    }
    for (doca_buf* buf : bufs) doca_buf_dec_refcount(buf, nullptr);
    EXPECT_EQ(doca_buf_inventory_destroy(inventory), DOCA_SUCCESS);
    EXPECT_EQ(doca_mmap_destroy(local_map), DOCA_SUCCESS);
    for (peer* p : {&a, &b}) p->close();
  }

  static bool idle(peer& p) { return zc::doca::testing::ctx_idle(p.ctx); }

  template <typename Done>
  bool progress_until(Done done, std::chrono::seconds limit = std::chrono::seconds(10)) {
    return zc::doca::testing::progress_both_until(a.pe, b.pe, done, limit);
  }

  // Connects a and b, and makes a's remote handle on b's event from b's export.
  void start() {
    ASSERT_EQ(doca_rdma_set_permissions(b.rdma, owner_permissions), DOCA_SUCCESS);
    for (peer* p : {&a, &b}) {
      ASSERT_EQ(doca_pe_connect_ctx(p->pe, p->ctx), DOCA_SUCCESS);
      ASSERT_EQ(doca_ctx_start(p->ctx), DOCA_SUCCESS);
    }
    ASSERT_TRUE(progress_until([&] { return a.running && b.running; }));
    auto blob = export_of(event);
    ASSERT_EQ(
        doca_sync_event_remote_net_create_from_export(a.dev, blob.data(), blob.size(), &remote),
        DOCA_SUCCESS);
  }

  // A buffer over local[word], with `data_len` bytes of data.
  doca_buf* local_buf(size_t word, size_t data_len) {
    doca_buf* buf = nullptr;
    EXPECT_EQ(doca_buf_inventory_buf_get_by_addr(inventory, local_map, &local[word], 8, &buf),
              DOCA_SUCCESS);
    EXPECT_EQ(doca_buf_set_data(buf, &local[word], data_len), DOCA_SUCCESS);
    bufs.push_back(buf);
    return buf;
  }

  // Submits a's task and waits for its completion (or failure); true when it completed.
  bool run(doca_task* task) {
    const int done = a.completed + a.failed + 1;
    EXPECT_EQ(doca_task_submit(task), DOCA_SUCCESS);
    EXPECT_TRUE(progress_until([&] { return a.completed + a.failed == done; }));
    return a.failed == 0;
  }

  peer a, b;
  alignas(8) uint64_t local[4] = {};
  doca_mmap* local_map = nullptr;
  doca_buf_inventory* inventory = nullptr;
  std::vector<doca_buf*> bufs;
  doca_sync_event* event = nullptr;              // b's
  doca_sync_event_remote_net* remote = nullptr;  // a's handle on it
};

TEST_P(doca_sync_event_remote, peer_gets_sets_and_adds_exactly) {
  start();
  ASSERT_EQ(doca_sync_event_update_set(event, 41), DOCA_SUCCESS);

  doca_buf* got = local_buf(0, 0);
  get_task* get = nullptr;
  ASSERT_EQ(doca_rdma_task_remote_net_sync_event_get_allocate_init(a.rdma, nullptr, remote, got,
                                                                   doca_data{.u64 = 1}, &get),
            DOCA_SUCCESS);
  EXPECT_EQ(doca_rdma_task_remote_net_sync_event_get_get_sync_event(get), remote);
  EXPECT_EQ(doca_rdma_task_remote_net_sync_event_get_get_dst_buf(get), got);
  ASSERT_TRUE(run(get_as_task(get))) << doca_error_get_name(a.last_error);
  EXPECT_EQ(local[0], 41u);
  size_t len = 0;
  ASSERT_EQ(doca_buf_get_data_len(got, &len), DOCA_SUCCESS);
  EXPECT_EQ(len, 8u);  // the value is appended after the (empty) data section

  local[1] = 0xfeedfacecafebeef;
  doca_buf* value = local_buf(1, 8);
  set_task* set = nullptr;
  ASSERT_EQ(doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(a.rdma, nullptr, remote,
                                                                          value, doca_data{}, &set),
            DOCA_SUCCESS);
  EXPECT_EQ(doca_rdma_task_remote_net_sync_event_notify_set_get_src_buf(set), value);
  ASSERT_TRUE(run(set_as_task(set))) << doca_error_get_name(a.last_error);
  EXPECT_EQ(value_of(event), 0xfeedfacecafebeefu);
  // b's subscriber sees it: a CPU wait on the set value returns.
  EXPECT_EQ(doca_sync_event_wait_eq(event, 0xfeedfacecafebeef, all_bits), DOCA_SUCCESS);

  ASSERT_EQ(doca_sync_event_update_set(event, 1000), DOCA_SUCCESS);
  doca_buf* fetched = local_buf(2, 0);
  add_task* add = nullptr;
  ASSERT_EQ(doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
                a.rdma, nullptr, remote, fetched, 24, doca_data{}, &add),
            DOCA_SUCCESS);
  EXPECT_EQ(doca_rdma_task_remote_net_sync_event_notify_add_get_add_data(add), 24u);
  doca_rdma_task_remote_net_sync_event_notify_add_set_add_data(add, 25);
  EXPECT_EQ(doca_rdma_task_remote_net_sync_event_notify_add_get_result_buf(add), fetched);
  ASSERT_TRUE(run(add_as_task(add))) << doca_error_get_name(a.last_error);
  EXPECT_EQ(local[2], 1000u);  // the value before the add
  EXPECT_EQ(value_of(event), 1025u);
  EXPECT_EQ(a.completed, 3);
}

TEST_P(doca_sync_event_remote, a_cpu_waiter_wakes_on_a_peers_add) {
  start();
  std::atomic<bool> returned{false};
  std::thread waiter([&] {
    EXPECT_EQ(doca_sync_event_wait_gt_yield(event, 2, all_bits), DOCA_SUCCESS);
    returned = true;
  });
  for (uint64_t i = 0; i < 3; ++i) {
    add_task* add = nullptr;
    ASSERT_EQ(doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
                  a.rdma, nullptr, remote, local_buf(i, 0), 1, doca_data{}, &add),
              DOCA_SUCCESS);
    ASSERT_TRUE(run(add_as_task(add)));
    EXPECT_EQ(local[i], i);
    if (i < 2) {
      EXPECT_FALSE(returned) << "woke at " << i + 1;
    }
  }
  // Never hang the test: if the waiter missed the adds, release it and fail.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!returned && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_TRUE(returned);
  if (!returned) doca_sync_event_update_set(event, 100);
  waiter.join();
}

// A NIC applies a peer's set alone; over zcstore the owner's rdma context applies it, from its
// progress engine: the set lands when b's engine is progressed, and not before.
TEST_P(doca_sync_event_remote, a_peers_set_lands_when_the_owner_progresses) {
  constexpr int progress_calls = 1000;
  start();
  ASSERT_EQ(doca_sync_event_update_set(event, 41), DOCA_SUCCESS);
  local[0] = 42;
  set_task* set = nullptr;
  ASSERT_EQ(doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
                a.rdma, nullptr, remote, local_buf(0, 8), doca_data{}, &set),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_task_submit(set_as_task(set)), DOCA_SUCCESS);
  for (int i = 0; i < progress_calls; ++i) doca_pe_progress(a.pe);  // a's engine only
  EXPECT_EQ(value_of(event), 41u) << "landed though nobody progressed the owner's engine";
  EXPECT_EQ(a.completed, 0);

  // The owner's thread waits by progressing its engine and reading the event (bounded), as
  // examples/doca/rdma_sync_event's responder does.
  std::atomic<bool> landed{false};
  std::thread owner([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (value_of(event) <= 41 && std::chrono::steady_clock::now() < deadline)
      doca_pe_progress(b.pe);
    landed = value_of(event) == 42;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (a.completed + a.failed == 0 && std::chrono::steady_clock::now() < deadline)
    doca_pe_progress(a.pe);
  owner.join();
  EXPECT_TRUE(landed);
  EXPECT_EQ(a.completed, 1);
}

TEST_P(doca_sync_event_remote, bad_submissions_and_an_ended_export_fail) {
  start();
  // No destination: refused at submit, nothing is sent.
  get_task* get = nullptr;
  ASSERT_EQ(doca_rdma_task_remote_net_sync_event_get_allocate_init(a.rdma, nullptr, remote, nullptr,
                                                                   doca_data{}, &get),
            DOCA_SUCCESS);
  EXPECT_EQ(doca_task_submit(get_as_task(get)), DOCA_ERROR_INVALID_VALUE);
  doca_rdma_task_remote_net_sync_event_get_set_dst_buf(get, local_buf(0, 0));
  doca_rdma_task_remote_net_sync_event_get_set_sync_event(get, nullptr);
  EXPECT_EQ(doca_task_submit(get_as_task(get)), DOCA_ERROR_INVALID_VALUE);  // no event
  doca_task_free(get_as_task(get));
  // A set needs 8 bytes of data to send.
  set_task* set = nullptr;
  ASSERT_EQ(doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
                a.rdma, nullptr, remote, local_buf(1, 4), doca_data{}, &set),
            DOCA_SUCCESS);
  EXPECT_EQ(doca_task_submit(set_as_task(set)), DOCA_ERROR_INVALID_VALUE);
  doca_task_free(set_as_task(set));

  // b stops its event: the export ends, and a's next task fails on the owner's refusal.
  ASSERT_EQ(doca_sync_event_update_set(event, 9), DOCA_SUCCESS);
  ASSERT_EQ(doca_sync_event_stop(event), DOCA_SUCCESS);
  add_task* add = nullptr;
  ASSERT_EQ(doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
                a.rdma, nullptr, remote, local_buf(2, 0), 1, doca_data{}, &add),
            DOCA_SUCCESS);
  EXPECT_FALSE(run(add_as_task(add)));
  EXPECT_EQ(a.failed, 1);
  EXPECT_EQ(a.last_error, DOCA_ERROR_NOT_FOUND);
  EXPECT_EQ(value_of(event), 9u);  // untouched
}

TEST_P(doca_sync_event_remote, owner_without_atomic_rights_refuses_add) {
  owner_permissions = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ;
  start();
  ASSERT_EQ(doca_sync_event_update_set(event, 5), DOCA_SUCCESS);
  get_task* get = nullptr;
  ASSERT_EQ(doca_rdma_task_remote_net_sync_event_get_allocate_init(
                a.rdma, nullptr, remote, local_buf(0, 0), doca_data{}, &get),
            DOCA_SUCCESS);
  ASSERT_TRUE(run(get_as_task(get)));
  EXPECT_EQ(local[0], 5u);
  add_task* add = nullptr;
  ASSERT_EQ(doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
                a.rdma, nullptr, remote, local_buf(1, 0), 1, doca_data{}, &add),
            DOCA_SUCCESS);
  EXPECT_FALSE(run(add_as_task(add)));
  EXPECT_EQ(a.last_error, DOCA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(value_of(event), 5u);
}

INSTANTIATE_TEST_SUITE_P(devices, doca_sync_event_remote, ::testing::Values("sm", "tcp"));

}  // namespace
