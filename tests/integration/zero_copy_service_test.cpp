// zcstore_comch_to_rdma_zero_copy between a real zcstore_target_rdma and this test, which plays a
// minimal initiator: the comch control client, one worker's producer and consumer, and an IO
// region exported for PCI (REFERENCE_SPEC §2.7, §3.6). Every wait is bounded.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comch/consumer.hpp"
#include "comch/producer.hpp"
#include "core/buffer.hpp"
#include "core/device.hpp"
#include "core/engine_thread.hpp"
#include "core/memory_map.hpp"
#include "integration/comch_host.hpp"
#include "rdma/context.hpp"
#include "storage/comch_control_channel.hpp"
#include "storage/io_message.hpp"
#include "storage/peer_consumers.hpp"
#include "storage/tcp_control_channel.hpp"
#include "support/subprocess.hpp"

namespace zc::test {
namespace {

using namespace std::chrono_literals;
using storage::io_message_size;
using storage::io_message_type;
using storage::message;
using storage::message_type;
using clock_type = std::chrono::steady_clock;

constexpr auto start_timeout = 20s;
constexpr auto exit_timeout = 20s;
constexpr auto response_timeout = 15s;
constexpr uint32_t block_size = 4096;
constexpr uint32_t block_count = 8;
const host_geometry geometry{block_size, block_count};
constexpr int control_timeout_s = 3;

const std::map<std::string, std::string> ucx_env = {
    {"UCX_MM_ERROR_HANDLING", "y"},
    {"UCX_KEEPALIVE_INTERVAL", "1s"},
    {"UCX_WARN_UNUSED_ENV_VARS", "n"},
};

// The port of the "listening on port N" line, once its line is complete (0 if it never is).
uint16_t logged_port(subprocess& p) {
  const std::string key = "listening on port ";
  const auto deadline = clock_type::now() + start_timeout;
  for (;;) {
    const std::string out = p.output();
    const size_t at = out.find(key);
    const size_t end = at == std::string::npos ? at : out.find('\n', at);
    if (end != std::string::npos)
      return static_cast<uint16_t>(std::stoul(out.substr(at + key.size())));
    if (clock_type::now() >= deadline || !p.running()) return 0;
    std::this_thread::sleep_for(10ms);
  }
}

// The two programs of the pipeline behind the host.
struct pipeline {
  std::string channel = unique_name("zc_zero_copy_it");
  std::unique_ptr<subprocess> target;
  std::unique_ptr<subprocess> service;
  uint16_t port = 0;

  // `workers` cores on both programs (--cpu 0, --cpu 1, ...).
  explicit pipeline(uint32_t workers = 1) {
    std::vector<std::string> cpus;
    for (uint32_t i = 0; i < workers; ++i) {
      cpus.push_back("--cpu");
      cpus.push_back(std::to_string(i % std::max(1u, std::thread::hardware_concurrency())));
    }
    std::vector<std::string> target_argv{binary("zcstore_target_rdma"),
                                         "-d",
                                         "tcp",
                                         "--poll-mode",
                                         "event",
                                         "--listen-port",
                                         "0",
                                         "--block-size",
                                         std::to_string(block_size),
                                         "--block-count",
                                         std::to_string(block_count)};
    target_argv.insert(target_argv.end(), cpus.begin(), cpus.end());
    target = std::make_unique<subprocess>(target_argv, ucx_env);
    if (!target->wait_for_output("listening on port", start_timeout)) return;
    port = logged_port(*target);
    if (port == 0) return;
    std::vector<std::string> service_argv{binary("zcstore_comch_to_rdma_zero_copy"),
                                          "-d",
                                          "tcp",
                                          "--poll-mode",
                                          "event",
                                          "--storage-server",
                                          "127.0.0.1:" + std::to_string(port),
                                          "--command-channel-name",
                                          channel,
                                          "--control-timeout",
                                          std::to_string(control_timeout_s)};
    service_argv.insert(service_argv.end(), cpus.begin(), cpus.end());
    service = std::make_unique<subprocess>(service_argv, ucx_env);
    (void)service->wait_for_output("listening on channel " + channel, start_timeout);
  }
  bool up() const {
    return service && service->output().find("listening on channel") != std::string::npos;
  }
  std::string outputs() const {
    return "--- target:\n" + (target ? target->output() : "") + "--- service:\n" +
           (service ? service->output() : "");
  }
};

constexpr uint32_t read_op = static_cast<uint32_t>(io_message_type::read);
constexpr uint32_t write_op = static_cast<uint32_t>(io_message_type::write);
constexpr uint32_t flush_op = static_cast<uint32_t>(io_message_type::flush);

void finish(host& h) {
  auto stop = h.call(message_type::stop_storage_request);
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->type, message_type::stop_storage_response);
  h.close_data_path();
  auto down = h.call(message_type::shutdown_request);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->type, message_type::shutdown_response);
  // The service's consumer expired at stop.
  EXPECT_TRUE(h.service_consumers().empty());
}

TEST(zero_copy_service, data_written_through_the_pipeline_reads_back_byte_for_byte) {
  pipeline p;
  ASSERT_TRUE(p.up()) << p.outputs();
  {
    host h(p.channel, geometry);
    ASSERT_TRUE(h.walk_to_running()) << p.outputs();
    uint8_t* region = h.region().data();
    const size_t bytes = size_t(block_size) * block_count;
    std::vector<uint8_t> pattern(bytes);
    for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>((i * 7 + i / 4096) % 251);
    std::memcpy(region, pattern.data(), bytes);
    for (uint32_t b = 0; b < block_count; ++b) {
      auto r =
          h.io(write_op, 100 + b, block_size, uint64_t(b) * block_size, uint64_t(b) * block_size);
      ASSERT_TRUE(r) << "write " << b << "\n" << p.outputs();
      EXPECT_EQ(r->view().type(), io_message_type::result);
      EXPECT_EQ(r->view().result(), status::success);
      EXPECT_EQ(r->view().user_data(), 100u + b);
    }
    std::memset(region, 0, bytes);
    // Read the blocks back into other places of the region: block b lands at slot (b + 3) % n.
    for (uint32_t b = 0; b < block_count; ++b) {
      const uint64_t slot = (b + 3) % block_count;
      auto r = h.io(read_op, 200 + b, block_size, slot * block_size, uint64_t(b) * block_size);
      ASSERT_TRUE(r) << "read " << b << "\n" << p.outputs();
      EXPECT_EQ(r->view().result(), status::success);
      EXPECT_EQ(r->view().user_data(), 200u + b);
      EXPECT_EQ(r->view().io_size(), block_size);
      EXPECT_EQ(r->view().requester_offset(), slot * block_size);
      EXPECT_EQ(std::memcmp(region + slot * block_size, pattern.data() + size_t(b) * block_size,
                            block_size),
                0)
          << "block " << b;
    }
    EXPECT_TRUE(h.received_length_ok());
    EXPECT_TRUE(h.send_errors().empty());
    finish(h);
  }
  auto service_exit = p.service->wait(exit_timeout);
  auto target_exit = p.target->wait(exit_timeout);
  EXPECT_EQ(service_exit, 0) << p.outputs();
  EXPECT_EQ(target_exit, 0) << p.outputs();
  const std::string out = p.service->output();
  EXPECT_NE(out.find("| Core: 0"), std::string::npos) << out;
  // 8 writes and 8 reads answered to the host.
  EXPECT_NE(out.find("| Operation count: 16"), std::string::npos) << out;
  EXPECT_NE(out.find("| PE hit rate: "), std::string::npos) << out;
}

// Two workers on each side: host worker i's IO reaches service worker i (the i-th smallest of
// the service's consumer ids) and its answer comes back to host worker i's consumer.
TEST(zero_copy_service, each_host_worker_is_answered_through_its_paired_service_worker) {
  pipeline p(2);
  ASSERT_TRUE(p.up()) << p.outputs();
  {
    host h(p.channel, geometry, 2);
    ASSERT_TRUE(h.walk_to_running()) << p.outputs();
    std::memset(h.region().data(), 0x5a, block_size);
    for (uint32_t round = 0; round < 3; ++round) {
      for (uint32_t w = 0; w < 2; ++w) {
        auto r = h.io(write_op, 1000 * w + round, block_size, 0, uint64_t(w) * block_size, w);
        ASSERT_TRUE(r) << "worker " << w << "\n" << p.outputs();
        EXPECT_EQ(r->worker, w);
        EXPECT_EQ(r->view().result(), status::success);
        EXPECT_EQ(r->view().user_data(), 1000u * w + round);
      }
    }
    finish(h);
  }
  EXPECT_EQ(p.service->wait(exit_timeout), 0) << p.outputs();
  EXPECT_EQ(p.target->wait(exit_timeout), 0) << p.outputs();
  // One block per core, 3 answers each.
  const std::string out = p.service->output();
  EXPECT_NE(out.find("| Core: 0\n| Operation count: 3"), std::string::npos) << out;
  EXPECT_NE(out.find("| Core: 1\n| Operation count: 3"), std::string::npos) << out;
}

// The host posts a single receive buffer, so the service's answers find none posted most of the
// time: they wait in the worker's backlog, in order, and all arrive.
TEST(zero_copy_service, answers_wait_for_a_host_that_posted_too_few_buffers) {
  pipeline p;
  ASSERT_TRUE(p.up()) << p.outputs();
  {
    host h(p.channel, geometry);
    ASSERT_TRUE(h.walk_to_running(1)) << p.outputs();
    uint8_t* region = h.region().data();
    for (uint32_t i = 0; i < transactions * block_size; ++i)
      region[i] = static_cast<uint8_t>(i * 13 + 1);
    std::vector<uint8_t> pattern(region, region + transactions * block_size);
    std::vector<std::array<uint64_t, 5>> writes, reads;
    for (uint64_t b = 0; b < transactions; ++b) {
      writes.push_back({write_op, b, block_size, b * block_size, (b + 2) * block_size});
      reads.push_back({read_op, 10 + b, block_size, b * block_size, (b + 2) * block_size});
    }
    auto w = h.ios(writes);
    ASSERT_EQ(w.size(), transactions) << p.outputs();
    for (auto& r : w) EXPECT_EQ(r.view().result(), status::success);
    std::memset(region, 0, transactions * block_size);
    auto r = h.ios(reads);
    ASSERT_EQ(r.size(), transactions) << p.outputs();
    std::vector<uint64_t> seen;
    for (auto& x : r) {
      EXPECT_EQ(x.view().result(), status::success);
      seen.push_back(x.view().user_data());
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<uint64_t>{10, 11, 12, 13}));
    EXPECT_EQ(std::memcmp(region, pattern.data(), pattern.size()), 0);
    finish(h);
  }
  EXPECT_EQ(p.service->wait(exit_timeout), 0) << p.outputs();
  EXPECT_EQ(p.target->wait(exit_timeout), 0) << p.outputs();
}

TEST(zero_copy_service, a_target_refusal_reaches_the_host_unchanged) {
  pipeline p;
  ASSERT_TRUE(p.up()) << p.outputs();
  {
    host h(p.channel, geometry);
    ASSERT_TRUE(h.walk_to_running()) << p.outputs();
    const uint64_t capacity = uint64_t(block_size) * block_count;
    // A write past the end of the storage: the target refuses it, the host sees INVALID_VALUE
    // (the reference forced SUCCESS).
    auto r = h.io(write_op, 7, block_size, 0, capacity);
    ASSERT_TRUE(r) << p.outputs();
    EXPECT_EQ(r->view().type(), io_message_type::result);
    EXPECT_EQ(r->view().result(), status::invalid_value);
    EXPECT_EQ(r->view().user_data(), 7u);
    EXPECT_EQ(r->view().storage_offset(), capacity);
    // Flush is relayed, and answered by the target (SUCCESS at once: its storage is memory).
    auto f = h.io(flush_op, 8, 0, 0, 0);
    ASSERT_TRUE(f) << p.outputs();
    EXPECT_EQ(f->view().result(), status::success);
    EXPECT_EQ(f->view().user_data(), 8u);
    // The pipeline still works after the refusals.
    auto ok_write = h.io(write_op, 9, block_size, 0, 0);
    ASSERT_TRUE(ok_write);
    EXPECT_EQ(ok_write->view().result(), status::success);
    finish(h);
  }
  // The service relayed everything it was given: no error of its own.
  EXPECT_EQ(p.service->wait(exit_timeout), 0) << p.outputs();
  // The target counts the IOs it refused as errors of its data path.
  EXPECT_TRUE(p.target->wait(exit_timeout).has_value()) << p.outputs();
}

TEST(zero_copy_service, requests_out_of_order_get_unexpected_with_the_clients_ids) {
  pipeline p;
  ASSERT_TRUE(p.up()) << p.outputs();
  host h(p.channel, geometry);
  auto r = h.call(message_type::start_storage_request);  // query expected
  ASSERT_TRUE(r) << p.outputs();
  EXPECT_EQ(r->type, message_type::error_response);
  const auto& e = std::get<storage::error_response_payload>(r->payload);
  EXPECT_EQ(e.error_code, status::unexpected);
  EXPECT_EQ(e.message, "Unexpected start_storage_request while expecting a query_storage_request");
  // Init asks for more cores than the service has: the text names the requested count.
  auto region_blob = h.region().export_pci();
  auto i = h.call(message_type::init_storage_request,
                  storage::init_storage_request_payload{transactions, 3, region_blob});
  ASSERT_TRUE(i);
  ASSERT_EQ(i->type, message_type::error_response);
  const auto& ie = std::get<storage::error_response_payload>(i->payload);
  EXPECT_EQ(ie.error_code, status::invalid_value);
  EXPECT_EQ(ie.message, "Unable to create 3 threads as only 1 were defined");
  auto down = h.call(message_type::shutdown_request);
  ASSERT_TRUE(down);
  EXPECT_EQ(down->type, message_type::shutdown_response);
  EXPECT_EQ(p.service->wait(exit_timeout), 0) << p.outputs();
  EXPECT_EQ(p.target->wait(exit_timeout), 0) << p.outputs();
}

TEST(zero_copy_service, a_killed_target_ends_the_session_with_a_failure) {
  pipeline p;
  ASSERT_TRUE(p.up()) << p.outputs();
  host h(p.channel, geometry);
  ASSERT_TRUE(h.walk_to_running()) << p.outputs();
  p.target->signal(SIGKILL);
  ASSERT_TRUE(p.target->wait(exit_timeout).has_value());
  // An IO now cannot succeed: it comes back with an error, or the service's consumer is gone.
  if (auto r = h.io(write_op, 1, block_size, 0, 0)) {
    EXPECT_EQ(r->view().type(), io_message_type::result);
    EXPECT_NE(r->view().result(), status::success);
    EXPECT_EQ(r->view().user_data(), 1u);
  }
  // The host loses the service's consumer or its connection; IOs get errors, never hang.
  const auto deadline = clock_type::now() + exit_timeout;
  bool ended = false;
  while (!ended && clock_type::now() < deadline) {
    storage::receive_result r = h.pump(10ms);
    ended = (r.failed() && r.code != status::time_out) || h.service_consumers().empty();
  }
  EXPECT_TRUE(ended) << p.outputs();
  auto exit = p.service->wait(exit_timeout);
  ASSERT_TRUE(exit.has_value()) << p.outputs();
  EXPECT_NE(*exit, 0);
  EXPECT_NE(p.service->output().find("connection lost"), std::string::npos) << p.outputs();
}

// The scenario with a real target: it stalls (SIGSTOP past the control timeout) with a
// read it has not served; the read is answered failed rather than left hanging, its retry on the
// other worker fails too (the target is fenced for the whole session), and once the target
// resumes nothing lands in the reused memory. That last check cannot tell whether the service
// fenced: with the early answer and the target's io_data stop both put back (checked by
// mutation) it stays green, because the resumed target receives the service's goodbye with the
// read and fails it unserved. The service's fence itself is proven by
// an_io_the_target_took_is_answered_failed_only_after_the_fence below, where the target took the
// IO before it went silent.
TEST(zero_copy_service, a_stalled_target_never_lands_a_transfer_after_its_io_failed) {
  pipeline p(2);
  ASSERT_TRUE(p.up()) << p.outputs();
  host h(p.channel, geometry, 2);
  ASSERT_TRUE(h.walk_to_running()) << p.outputs();
  uint8_t* region = h.region().data();
  // Block 0 of the storage holds 0x5A: a stale read of it would put 0x5A into the region.
  std::memset(region, 0x5A, block_size);
  auto w = h.io(write_op, 1, block_size, 0, 0);
  ASSERT_TRUE(w) << p.outputs();
  ASSERT_EQ(w->view().result(), status::success);
  p.target->signal(SIGSTOP);
  ASSERT_TRUE(p.target->wait_stopped(start_timeout));
  auto r = h.io(read_op, 2, block_size, block_size, 0, 0);
  ASSERT_TRUE(r) << "the stalled IO was never answered\n" << p.outputs();
  EXPECT_EQ(r->view().user_data(), 2u);
  EXPECT_NE(r->view().result(), status::success);
  // The host reuses the slot's memory at once and retries the read on its other worker, into
  // other memory: it fails too (the target is fenced for the whole session), and never hangs.
  std::memset(region + block_size, 0xC3, 2 * block_size);
  if (auto retry = h.io(read_op, 3, block_size, 2 * block_size, 0, 1)) {
    EXPECT_EQ(retry->view().user_data(), 3u);
    EXPECT_NE(retry->view().result(), status::success);
  }
  p.target->signal(SIGCONT);
  // Long enough for the resumed target to serve what it had queued.
  std::this_thread::sleep_for(1500ms);
  for (uint32_t i = 0; i < 2 * block_size; ++i)
    ASSERT_EQ(region[block_size + i], 0xC3) << "a stale transfer landed at byte " << i << "\n"
                                            << p.outputs();
  EXPECT_NE(p.service->output().find("fencing"), std::string::npos) << p.outputs();
  // The session ended with a failure; nothing is left running.
  auto exit = p.service->wait(exit_timeout);
  ASSERT_TRUE(exit.has_value()) << p.outputs();
  EXPECT_NE(*exit, 0);
}

// A target that takes IOs and never answers them (stalled, or cut off behind a live link), and
// that the test can make act on one later: the stale transfer of a target that resumes. It plays
// the target's side of REFERENCE_SPEC §2.7 for one worker on a thread of its own.
class stalling_target {
 public:
  stalling_target() : server_(0), device_(core::device::open("tcp")) {
    thread_ = std::thread([this] { run(); });
  }
  ~stalling_target() {
    stop_ = true;
    thread_.join();
    engine_.call([this] {
      for (auto* c : {control_.get(), data_.get()})
        if (c != nullptr) (void)c->stop();
    });
    (void)engine_.wait_until([this] { return stopped(); }, 5000ms);
    engine_.call([this] {
      control_.reset();
      data_.reset();
    });
  }
  uint16_t port() const { return server_.port(); }

  // The first IO message that arrived (bounded wait).
  std::optional<std::array<uint8_t, io_message_size>> first_request(
      std::chrono::milliseconds within) {
    const auto deadline = clock_type::now() + within;
    for (;;) {
      {
        std::lock_guard lock(mutex_);
        if (!requests_.empty()) return requests_.front();
      }
      if (clock_type::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(10ms);
    }
  }

  // The stale answer to a read: writes `fill` over the IO's range of the requester's memory
  // through io_data, as the target does once it resumes. The write's own result (bounded).
  status land_stale_read(uint64_t requester_offset, uint32_t size, uint8_t fill) {
    auto done = std::make_shared<std::atomic<int>>(-1);
    const status submitted = engine_.call([&, done] {
      std::memset(staging_->data(), fill, size);
      core::buffer* src = nullptr;
      core::buffer* dst = nullptr;
      status r = inventory_.get_by_addr(*staging_, staging_->data(), size, src);
      if (ok(r)) r = inventory_.get_by_addr(*remote_, remote_->data(), remote_->size(), dst);
      if (ok(r)) r = src->reset(staging_->data(), size);
      if (ok(r)) r = dst->reset(remote_->data() + requester_offset, size);
      if (!ok(r)) return r;
      src->append(size);
      rdma::write_task* t = nullptr;
      r = data_->allocate(core::make_user_data(0), t);
      if (!ok(r)) return r;
      t->set(*src, *dst);
      write_done_ = done;
      return data_->submit(*t);
    });
    if (!ok(submitted)) return submitted;
    (void)engine_.wait_until([done] { return done->load() >= 0; }, 10000ms);
    return done->load() >= 0 ? static_cast<status>(done->load()) : status::time_out;
  }

 private:
  bool stopped() const {
    for (auto* c : {control_.get(), data_.get()})
      if (c != nullptr && c->state() != core::context_state::idle) return false;
    return true;
  }

  void run() {
    while (!stop_) {
      storage::receive_result r = storage::wait_for(server_, 20ms);
      if (r.msg) (void)server_.send(answer(*r.msg));
    }
  }

  message answer(const message& m) {
    switch (m.type) {
      case message_type::query_storage_request:
        return storage::make_response(m, message_type::query_storage_response,
                                      storage::query_storage_response_payload{
                                          uint64_t(block_size) * block_count, block_size});
      case message_type::init_storage_request: {
        const auto& init = std::get<storage::init_storage_request_payload>(m.payload);
        engine_.call([&] { build(init.transaction_count, init.mmap_export); });
        return storage::make_response(m, message_type::init_storage_response);
      }
      case message_type::create_rdma_connection_request: {
        const auto& c = std::get<storage::rdma_connection_payload>(m.payload);
        auto mine = engine_.call([&] {
          rdma::context& ctx = c.role == storage::rdma_role::io_control ? *control_ : *data_;
          auto blob = ctx.export_connection();
          ctx.connect(c.connection_details);
          return blob;
        });
        return storage::make_response(
            m, message_type::create_rdma_connection_response,
            storage::rdma_connection_payload{c.context_idx, c.role, std::move(mine)});
      }
      case message_type::start_storage_request:
        engine_.call([&] {
          for (auto* t : receives_) (void)control_->submit(*t);
        });
        return storage::make_response(m, message_type::start_storage_response);
      case message_type::stop_storage_request:
        return storage::make_response(m, message_type::stop_storage_response);
      case message_type::shutdown_request:
        return storage::make_response(m, message_type::shutdown_response);
      default:
        return storage::make_error_response(m, status::not_supported, "not in this script");
    }
  }

  // On the engine thread: both contexts, the receives (IOs are kept, never answered), one write.
  void build(uint32_t transactions, const std::vector<uint8_t>& mmap_export) {
    remote_ = core::memory_map::import_rdma(mmap_export);
    messages_ = core::memory_map::allocate(size_t(transactions) * io_message_size,
                                           core::access::local_read_write);
    staging_ = core::memory_map::allocate(block_size, core::access::local_read_write);
    control_ = std::make_unique<rdma::context>(engine_.engine(), device_);
    data_ = std::make_unique<rdma::context>(engine_.engine(), device_);
    control_->configure<rdma::receive_task>(
        transactions,
        [this](rdma::receive_task& t) {
          std::array<uint8_t, io_message_size> copy{};
          std::memcpy(copy.data(), t.dst().head(), io_message_size);
          std::lock_guard lock(mutex_);
          requests_.push_back(copy);
        },
        [](rdma::receive_task&) {});
    auto finished = [this](rdma::write_task& t) {
      if (write_done_) write_done_->store(static_cast<int>(t.result()));
    };
    data_->configure<rdma::write_task>(1, finished, finished);
    for (uint32_t i = 0; i < transactions; ++i) {
      core::buffer* b = nullptr;
      ASSERT_EQ(inventory_.get_by_addr(*messages_, messages_->data() + i * io_message_size,
                                       io_message_size, b),
                status::success);
      rdma::receive_task* t = nullptr;
      ASSERT_EQ(control_->allocate(core::make_user_data(i), t), status::success);
      t->set_dst(*b);
      receives_.push_back(t);
    }
    ASSERT_EQ(control_->start(), status::success);
    ASSERT_EQ(data_->start(), status::success);
  }

  storage::tcp_server_channel server_;
  core::device device_;
  core::engine_thread engine_{core::poll_mode::event};
  std::unique_ptr<core::memory_map> remote_, messages_, staging_;
  core::buffer_inventory inventory_{4096};
  std::vector<rdma::receive_task*> receives_;
  std::shared_ptr<std::atomic<int>> write_done_;
  std::unique_ptr<rdma::context> control_, data_;
  std::mutex mutex_;
  std::vector<std::array<uint8_t, io_message_size>> requests_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// The storage rule, where it matters: a target that took an IO (its send was acknowledged) and
// then says nothing gets that IO answered failed only after the service fenced it out of the
// host's memory. The host reuses the memory at once; the transfer the target makes when it
// resumes is refused, and the host's bytes stay as the host wrote them.
TEST(zero_copy_service, an_io_the_target_took_is_answered_failed_only_after_the_fence) {
  stalling_target t;
  const std::string channel = unique_name("zc_zero_copy_fence");
  subprocess service({binary("zcstore_comch_to_rdma_zero_copy"), "-d", "tcp", "--poll-mode",
                      "event", "--storage-server", "127.0.0.1:" + std::to_string(t.port()),
                      "--command-channel-name", channel, "--control-timeout", "2", "--cpu", "0"},
                     ucx_env);
  ASSERT_TRUE(service.wait_for_output("listening on channel " + channel, start_timeout))
      << service.output();
  host h(channel, geometry);
  ASSERT_TRUE(h.walk_to_running()) << service.output();
  uint8_t* region = h.region().data();
  auto r = h.io(read_op, 7, block_size, block_size, 0);
  ASSERT_TRUE(r) << "the IO the target took was never answered\n" << service.output();
  EXPECT_EQ(r->view().user_data(), 7u);
  EXPECT_EQ(r->view().type(), io_message_type::result);
  EXPECT_NE(r->view().result(), status::success);
  // The target had it, under the service's tag rather than the host's user_data.
  auto request = t.first_request(1000ms);
  ASSERT_TRUE(request);
  EXPECT_NE(storage::io_message_view(request->data()).user_data(), 7u);
  // The host reuses the memory; the target resumes and answers the read.
  std::memset(region + block_size, 0xC3, block_size);
  EXPECT_NE(t.land_stale_read(block_size, block_size, 0x5A), status::success);
  for (uint32_t i = 0; i < block_size; ++i)
    ASSERT_EQ(region[block_size + i], 0xC3) << "a stale transfer landed at byte " << i;
  EXPECT_NE(service.output().find("fencing"), std::string::npos) << service.output();
  auto exit = service.wait(exit_timeout);
  ASSERT_TRUE(exit.has_value()) << service.output();
  EXPECT_NE(*exit, 0);
}

TEST(zero_copy_service, a_lost_client_fails_the_session_and_shuts_the_target_down) {
  pipeline p;
  ASSERT_TRUE(p.up()) << p.outputs();
  {
    host h(p.channel, geometry);
    ASSERT_TRUE(h.walk_to_running()) << p.outputs();
    h.close_data_path();
    h.client().close();
  }
  auto exit = p.service->wait(exit_timeout);
  ASSERT_TRUE(exit.has_value()) << p.outputs();
  EXPECT_EQ(*exit, 1) << p.outputs();
  // The target was told shutdown and ended.
  EXPECT_TRUE(p.target->wait(exit_timeout).has_value()) << p.outputs();
}

TEST(zero_copy_service, a_stop_request_while_idle_ends_both_programs_cleanly) {
  pipeline p;
  ASSERT_TRUE(p.up()) << p.outputs();
  p.service->signal(SIGTERM);
  EXPECT_EQ(p.service->wait(exit_timeout), 0) << p.outputs();
  // The target was told shutdown: it ends too, and nothing is left running.
  EXPECT_EQ(p.target->wait(exit_timeout), 0) << p.outputs();
  EXPECT_NE(p.service->output().find("| Core: 0"), std::string::npos) << p.outputs();
}

TEST(zero_copy_service, bad_flags_are_one_line_and_exit_2) {
  const std::vector<std::vector<std::string>> cases = {
      {"--cpu", "0", "--storage-server", "1.2.3:4"},
      {"--cpu", "0", "--storage-server", "127.0.0.1:1", "--control-timeout", "0"},
      {"--storage-server", "127.0.0.1:1"},
      {"--cpu", "0"},
  };
  for (const auto& args : cases) {
    std::vector<std::string> argv{binary("zcstore_comch_to_rdma_zero_copy")};
    argv.insert(argv.end(), args.begin(), args.end());
    subprocess s(argv);
    EXPECT_EQ(s.wait(exit_timeout), 2) << s.output();
    EXPECT_NE(s.output().find("zcstore_comch_to_rdma_zero_copy: "), std::string::npos);
  }
  subprocess zero({binary("zcstore_comch_to_rdma_zero_copy"), "--cpu", "0", "--storage-server",
                   "127.0.0.1:1", "--control-timeout", "0"});
  EXPECT_EQ(zero.wait(exit_timeout), 2);
  EXPECT_NE(zero.output().find("control-timeout must not be zero"), std::string::npos);
  EXPECT_NE(zero.output().find("Invalid zero_copy_app_configuration detected"), std::string::npos);
}

}  // namespace
}  // namespace zc::test
