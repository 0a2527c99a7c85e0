// zcstore_comch_to_rdma_zero_copy between a real zcstore_target_rdma and this test, which plays a
// minimal initiator: the comch control client, one worker's producer and consumer, and an IO
// region exported for PCI (REFERENCE_SPEC §2.7, §3.6). Every wait is bounded.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comch/consumer.hpp"
#include "comch/producer.hpp"
#include "core/buffer.hpp"
#include "core/memory_map.hpp"
#include "integration/comch_host.hpp"
#include "storage/peer_consumers.hpp"
#include "storage/comch_control_channel.hpp"
#include "storage/io_message.hpp"
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
