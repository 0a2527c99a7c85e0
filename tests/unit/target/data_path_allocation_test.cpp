// The target's data path allocates nothing per IO: a target_worker serving reads and writes from
// an in-process requester (its own engine thread, with the io_control and io_data connections a
// service would make) makes no heap allocation through operator new once warmed up, on either
// engine thread (counted by replacing operator new in this test binary). The worker's thread is
// private, so its count is the process's minus the test thread's; the requester's thread, which
// is counted with it, must allocate nothing either. UCX's own malloc() calls are not counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/buffer.hpp"
#include "core/device.hpp"
#include "core/engine_thread.hpp"
#include "core/memory_map.hpp"
#include "rdma/context.hpp"
#include "storage/control_message.hpp"
#include "storage/io_message.hpp"
#include "support/allocation_counter.hpp"
#include "target/storage.hpp"
#include "target/worker.hpp"

namespace zc::target {
namespace {

using namespace std::chrono_literals;
using storage::io_message_size;
using storage::io_message_type;
using storage::io_message_view;

constexpr uint32_t block = 4096;
constexpr uint32_t blocks = 64;
constexpr uint32_t batch = 8;          // IOs in flight per round: even slots read, odd ones write
constexpr uint32_t transactions = 16;  // the worker's slots: more than a round needs
constexpr std::chrono::seconds bound{10};

uint8_t storage_byte(size_t i) {
  return static_cast<uint8_t>(i % 251);
}
uint8_t requester_byte(size_t i) {
  return static_cast<uint8_t>((i * 7 + 3) % 253);
}

// The requester: what a service worker holds for one target worker. Everything but `thread`
// belongs to the engine thread.
struct requester {
  core::engine_thread thread{core::poll_mode::event};
  std::vector<uint8_t> region = std::vector<uint8_t>(size_t(blocks) * block);
  std::vector<uint8_t> messages = std::vector<uint8_t>(2 * batch * io_message_size);
  std::unique_ptr<core::memory_map> region_map;  // exported: the target reads and writes it
  std::unique_ptr<core::memory_map> messages_map;
  std::unique_ptr<core::buffer_inventory> inventory;
  std::unique_ptr<rdma::context> control;
  std::unique_ptr<rdma::context> data;
  std::array<core::buffer*, batch> requests{};
  std::array<core::buffer*, batch> responses{};
  std::array<rdma::send_task*, batch> sends{};
  std::array<rdma::receive_task*, batch> receives{};
  uint32_t sent = 0;
  uint32_t answered = 0;
  uint32_t failed = 0;             // failed tasks and unexpected responses
  std::array<bool, batch> seen{};  // responses of this round, by request
  uint64_t round_base = 0;         // user_data of this round's first request

  void build(const core::device& device) {
    thread.call([&] {
      for (uint32_t k = 0; k < blocks; ++k)
        for (uint32_t i = 0; i < block; ++i)
          region[size_t(k) * block + i] = k % 2 == 1 ? requester_byte(size_t(k) * block + i) : 0;
      region_map = core::memory_map::wrap(region.data(), region.size(),
                                          core::access::local_read_write | core::rdma_all);
      messages_map =
          core::memory_map::wrap(messages.data(), messages.size(), core::access::local_read_write);
      inventory = std::make_unique<core::buffer_inventory>(2 * batch);
      control = std::make_unique<rdma::context>(thread.engine(), device);
      data = std::make_unique<rdma::context>(thread.engine(), device);
      control->configure<rdma::receive_task>(
          batch, [this](rdma::receive_task& t) { on_response(t); },
          [this](rdma::receive_task&) { ++failed; });
      control->configure<rdma::send_task>(
          batch, [this](rdma::send_task&) { ++sent; },
          [this](rdma::send_task&) {
            ++sent;
            ++failed;
          });
      for (uint32_t k = 0; k < batch; ++k) {
        uint8_t* request = messages.data() + k * io_message_size;
        uint8_t* response = messages.data() + (batch + k) * io_message_size;
        ASSERT_EQ(inventory->get_by_addr(*messages_map, request, io_message_size, requests[k]),
                  status::success);
        ASSERT_EQ(inventory->get_by_addr(*messages_map, response, io_message_size, responses[k]),
                  status::success);
        ASSERT_EQ(control->allocate(core::make_user_data(k), sends[k]), status::success);
        ASSERT_EQ(control->allocate(core::make_user_data(k), receives[k]), status::success);
        sends[k]->set_src(*requests[k]);
        receives[k]->set_dst(*responses[k]);
      }
      ASSERT_EQ(control->start(), status::success);
      ASSERT_EQ(data->start(), status::success);
    });
  }

  rdma::context& of(storage::rdma_role role) {
    return role == storage::rdma_role::io_control ? *control : *data;
  }
  bool running() {
    return thread.call([&] {
      return control->state() == core::context_state::running &&
             data->state() == core::context_state::running;
    });
  }

  // Engine thread. A response may land in any posted receive: it names its request itself.
  void on_response(rdma::receive_task& t) {
    ++answered;
    io_message_view m(t.dst().head());
    const uint64_t k = m.user_data() - round_base;
    if (t.received_length() != io_message_size || m.type() != io_message_type::result ||
        m.result() != status::success || k >= batch || seen[k]) {
      ++failed;
      return;
    }
    seen[k] = true;
  }

  // One round: every receive posted, then `batch` IOs sent, each on its own block.
  void submit_round(uint64_t base) {
    thread.call([&] {
      sent = answered = 0;
      seen.fill(false);
      round_base = base;
      for (uint32_t k = 0; k < batch; ++k) {
        responses[k]->set_data(responses[k]->head(), 0);
        ASSERT_EQ(control->submit(*receives[k]), status::success);
      }
      for (uint32_t k = 0; k < batch; ++k) {
        io_message_view m(requests[k]->head());
        m.set_type(k % 2 == 0 ? io_message_type::read : io_message_type::write);
        m.set_user_data(base + k);
        m.set_result(status::success);
        m.set_io_size(block);
        m.set_requester_offset(uint64_t(k) * block);
        m.set_storage_offset(uint64_t(k) * block);
        ASSERT_EQ(requests[k]->set_data(requests[k]->head(), io_message_size), status::success);
        ASSERT_EQ(control->submit(*sends[k]), status::success);
      }
    });
  }

  // Waits, bounded, for the round's sends and responses. Polls through call(), which allocates
  // nothing on the engine thread (wait_until would: it queues a waiter there).
  bool round_done() {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < deadline) {
      if (thread.call([&] { return sent == batch && answered == batch; })) return true;
      std::this_thread::sleep_for(100us);
    }
    return false;
  }

  void destroy() {
    thread.call([&] {
      control.reset();
      data.reset();
      region_map.reset();
    });
  }
};

class target_data_path : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    device = core::device::open(GetParam());
    store = target_storage::in_memory(uint64_t(blocks) * block);
    for (size_t i = 0; i < store->map().size(); ++i) store->map().data()[i] = storage_byte(i);
    req.build(device);
    remote = core::memory_map::import_rdma(
        req.thread.call([&] { return req.region_map->export_rdma(); }));
    worker = std::make_unique<target_worker>(0, core::poll_mode::event, device, *store, *remote,
                                             transactions);
    for (auto role : {storage::rdma_role::io_control, storage::rdma_role::io_data}) {
      auto mine = req.thread.call([&] { return req.of(role).export_connection(); });
      auto theirs = worker->connect(role, mine);
      req.thread.call([&] { req.of(role).connect(theirs); });
    }
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (!(worker->ready() && req.running()) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(worker->ready() && req.running()) << "connections not running after 10 s";
    worker->start_data_path();
  }

  void TearDown() override {
    if (worker) worker->stop();
    worker.reset();
    req.destroy();
  }

  void round(uint64_t i) {
    req.submit_round(i * batch);
    ASSERT_TRUE(req.round_done()) << "round " << i << " not answered within 10 s";
    EXPECT_EQ(req.thread.call([&] { return req.failed; }), 0u) << "round " << i;
  }

  core::device device;
  std::unique_ptr<target_storage> store;
  requester req;
  std::unique_ptr<core::memory_map> remote;
  std::unique_ptr<target_worker> worker;
};

TEST_P(target_data_path, reads_and_writes_allocate_nothing_per_io_in_steady_state) {
  uint64_t rounds = 0;
  // Warm-up: UCX's wire-up, the rdma layer's reply pool and queues grow once.
  for (int i = 0; i < 20; ++i) ASSERT_NO_FATAL_FAILURE(round(rounds++));
  // UCX does periodic work of its own on these threads (keepalive rounds every second): a window
  // that spans one may see its allocations. An allocation per IO shows in every window of 50
  // rounds, so one clean window out of three proves the data path allocates nothing.
  uint64_t fewest = UINT64_MAX;
  for (int window = 0; window < 3 && fewest != 0; ++window) {
    const uint64_t process_before = test::allocations_in_process();
    const uint64_t mine_before = test::allocations_on_this_thread();
    for (int i = 0; i < 50; ++i) ASSERT_NO_FATAL_FAILURE(round(rounds++));
    const uint64_t others = (test::allocations_in_process() - process_before) -
                            (test::allocations_on_this_thread() - mine_before);
    fewest = std::min(fewest, others);
  }
  EXPECT_EQ(fewest, 0u) << "heap allocations on the worker's and the requester's threads";

  // Every IO moved its bytes: reads brought the storage's blocks, writes stored the requester's.
  const worker_stats stats = worker->stats();  // also orders the worker's writes before ours
  EXPECT_EQ(stats.operations, rounds * batch);
  EXPECT_EQ(stats.errors, 0u);
  const uint8_t* storage = store->map().data();
  req.thread.call([&] {
    for (uint32_t k = 0; k < batch; ++k) {
      const size_t at = size_t(k) * block;
      if (k % 2 == 0)
        EXPECT_EQ(std::memcmp(req.region.data() + at, storage + at, block), 0) << "read " << k;
      else
        EXPECT_EQ(std::memcmp(storage + at, req.region.data() + at, block), 0) << "write " << k;
    }
    for (size_t i = 0; i < block; ++i) {  // against the patterns, not only each other
      ASSERT_EQ(storage[i], storage_byte(i));
      ASSERT_EQ(storage[block + i], requester_byte(block + i));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(transports, target_data_path, ::testing::Values("tcp", "sm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace zc::target
