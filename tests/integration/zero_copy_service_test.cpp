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
#include "service/peer_consumers.hpp"
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
constexpr uint32_t transactions = 4;  // T: the service uses 2T
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

struct io_result {
  uint32_t worker = 0;  // the host worker whose consumer it reached
  std::array<uint8_t, io_message_size> bytes{};
  storage::io_message_view view() { return storage::io_message_view(bytes.data()); }
};

// The initiator's side: control client, IO region, per worker a consumer and a producer.
class host {
 public:
  explicit host(const std::string& channel, uint32_t workers = 1)
      : workers_(workers),
        client_(std::make_unique<storage::comch_control_client>("auto", channel,
                                                                clock_type::now() + start_timeout)),
        region_(core::memory_map::allocate(size_t(block_size) * block_count,
                                           core::access::local_read_write |
                                               core::access::pci_read_write |
                                               core::access::rdma_read | core::access::rdma_write)),
        messages_(core::memory_map::allocate(
            size_t(workers) * 3 * transactions * io_message_size,
            core::access::local_read_write | core::access::pci_read_write)),
        inventory_(workers * 3 * transactions) {}

  ~host() { close_data_path(); }

  storage::comch_control_client& client() { return *client_; }
  core::memory_map& region() { return *region_; }
  const service::peer_consumers& service_consumers() const { return service_consumers_; }

  // Polls the channel once (bounded); a control message that arrives here is kept.
  storage::receive_result pump(std::chrono::milliseconds timeout = 5ms) {
    storage::receive_result r = storage::wait_for(*client_, timeout);
    while (auto e = client_->take_consumer_event()) service_consumers_.apply(*e);
    return r;
  }

  // Sends a request (mid == cid, as the initiator does) and waits for its response.
  std::optional<message> call(message_type type, storage::message_payload payload = {}) {
    const uint32_t id = next_id_++;
    if (client_->send({type, id, id, std::move(payload)}) != status::success) return std::nullopt;
    const auto deadline = clock_type::now() + response_timeout;
    while (clock_type::now() < deadline) {
      storage::receive_result r = pump(10ms);
      if (r.msg) {
        EXPECT_EQ(r.msg->message_id, id);
        EXPECT_EQ(r.msg->correlation_id, id);
        return r.msg;
      }
      if (r.failed() && r.code != status::time_out) return std::nullopt;
    }
    return std::nullopt;
  }

  // Per host worker, in index order (the pairing rule): a consumer (2T receives, of which
  // `posted` are posted) started before the next one is created, and a producer (T sends).
  void open_data_path(uint32_t posted = 2 * transactions) {
    for (uint32_t i = 0; i < workers_ * 3 * transactions; ++i) {
      core::buffer* b = nullptr;
      ASSERT_EQ(inventory_.get_by_addr(*messages_, messages_->data() + i * io_message_size,
                                       io_message_size, b),
                status::success);
      buffers_.push_back(b);
    }
    for (uint32_t w = 0; w < workers_; ++w) {
      rxs_.push_back(std::make_unique<comch::consumer>(
          client_->engine(), *client_->connection(),
          comch::consumer_config{.buffers = messages_.get(),
                                 .post_recv_tasks = 2 * transactions,
                                 .on_recv =
                                     [this, w](comch::consumer_post_recv_task& t) {
                                       io_result r;
                                       r.worker = w;
                                       std::memcpy(r.bytes.data(), t.buf().head(), io_message_size);
                                       received_length_ok_ &=
                                           t.received_length() == io_message_size;
                                       responses_.push_back(r);
                                       (void)t.buf().set_data(t.buf().head(), 0);
                                       (void)rxs_[w]->submit(t);
                                     },
                                 .on_recv_error = [](comch::consumer_post_recv_task&) {}}));
      ASSERT_EQ(rxs_.back()->start(), status::success);
      txs_.push_back(std::make_unique<comch::producer>(
          client_->engine(), *client_->connection(),
          comch::producer_config{.send_tasks = transactions,
                                 .on_send_done = [this](comch::producer_send_task&) { ++sent_; },
                                 .on_send_error =
                                     [this](comch::producer_send_task& t) {
                                       send_errors_.push_back(t.result());
                                       ++sent_;
                                     }}));
      ASSERT_EQ(txs_.back()->start(), status::success);
      const uint32_t base = w * 3 * transactions;
      for (uint32_t i = 0; i < posted; ++i)
        ASSERT_EQ(rxs_[w]->submit(*rxs_[w]->allocate_post_recv(*buffers_[base + i])),
                  status::success);
      send_tasks_.emplace_back();
      for (uint32_t i = 0; i < transactions; ++i) {
        send_tasks_[w].push_back(txs_[w]->allocate_send(*buffers_[base + 2 * transactions + i], 0));
        ASSERT_NE(send_tasks_[w].back(), nullptr);
      }
    }
  }

  // Up to T IOs at once; the responses, in arrival order (empty when not all came in time).
  std::vector<io_result> ios(const std::vector<std::array<uint64_t, 5>>& requests) {
    const auto target = service_consumers_.for_worker(0);
    if (!target || requests.size() > transactions) return {};
    const uint64_t sent_before = sent_;
    const auto deadline = clock_type::now() + response_timeout;
    for (size_t i = 0; i < requests.size(); ++i) {
      core::buffer& b = *buffers_[2 * transactions + i];  // worker 0's
      storage::io_message_view m(b.head());
      m.clear();
      m.set_type(static_cast<io_message_type>(requests[i][0]));
      m.set_user_data(requests[i][1]);
      m.set_io_size(static_cast<uint32_t>(requests[i][2]));
      m.set_requester_offset(requests[i][3]);
      m.set_storage_offset(requests[i][4]);
      (void)b.set_data(b.head(), io_message_size);
      send_tasks_[0][i]->set(b, *target);
      status s = status::again;
      while ((s = txs_[0]->submit(*send_tasks_[0][i])) == status::again &&
             clock_type::now() < deadline)
        pump(1ms);
      if (s != status::success) return {};
    }
    while ((responses_.size() < requests.size() || sent_ - sent_before < requests.size()) &&
           clock_type::now() < deadline) {
      storage::receive_result r = pump(5ms);
      if (r.failed() && r.code != status::time_out) break;
    }
    if (responses_.size() < requests.size()) return {};
    std::vector<io_result> out(responses_.begin(), responses_.end());
    responses_.clear();
    return out;
  }

  // One IO, waited for: the response, or nullopt when none came in time.
  std::optional<io_result> io(uint32_t type, uint64_t user_data, uint32_t size,
                              uint64_t requester_offset, uint64_t storage_offset,
                              uint32_t worker = 0) {
    core::buffer& b = *buffers_[worker * 3 * transactions + 2 * transactions];
    storage::io_message_view m(b.head());
    m.clear();
    m.set_type(static_cast<io_message_type>(type));
    m.set_user_data(user_data);
    m.set_io_size(size);
    m.set_requester_offset(requester_offset);
    m.set_storage_offset(storage_offset);
    (void)b.set_data(b.head(), io_message_size);
    // Host worker i sends to the service consumer with the i-th smallest id.
    const auto target = service_consumers_.for_worker(worker);
    if (!target) return std::nullopt;
    comch::producer_send_task* send_task = send_tasks_[worker][0];
    send_task->set(b, *target);
    const uint64_t sent_before = sent_;
    const auto deadline = clock_type::now() + response_timeout;
    status s = status::again;
    while ((s = txs_[worker]->submit(*send_task)) == status::again && clock_type::now() < deadline)
      pump(1ms);
    if (s != status::success) return std::nullopt;
    while ((responses_.empty() || sent_ == sent_before) && clock_type::now() < deadline) {
      storage::receive_result r = pump(5ms);
      if (r.failed() && r.code != status::time_out) break;
    }
    if (responses_.empty()) return std::nullopt;
    io_result r = responses_.front();
    responses_.pop_front();
    return r;
  }

  // Stops (and so expires) the host's consumer and producer, bounded.
  void close_data_path() {
    for (auto& rx : rxs_) (void)rx->stop();
    for (auto& tx : txs_) (void)tx->stop();
    const auto deadline = clock_type::now() + 5s;
    auto idle = [&] {
      for (auto& rx : rxs_)
        if (rx->state() != core::context_state::idle) return false;
      for (auto& tx : txs_)
        if (tx->state() != core::context_state::idle) return false;
      return true;
    };
    while (!idle() && clock_type::now() < deadline) pump(5ms);
    rxs_.clear();
    txs_.clear();
  }

  bool received_length_ok() const { return received_length_ok_; }
  const std::vector<status>& send_errors() const { return send_errors_; }
  std::deque<io_result>& responses() { return responses_; }

  // Query -> init -> (host data path) -> start, as an initiator does; false on any failure.
  bool walk_to_running(uint32_t posted = 2 * transactions) {
    auto q = call(message_type::query_storage_request);
    if (!q || q->type != message_type::query_storage_response) return false;
    const auto& geometry = std::get<storage::query_storage_response_payload>(q->payload);
    EXPECT_EQ(geometry.total_size, uint64_t(block_size) * block_count);
    EXPECT_EQ(geometry.block_size, block_size);
    auto i =
        call(message_type::init_storage_request,
             storage::init_storage_request_payload{transactions, workers_, region_->export_pci()});
    if (!i || i->type != message_type::init_storage_response) {
      ADD_FAILURE() << "init: " << (i ? storage::to_string(i->type) : "no answer");
      return false;
    }
    // The service's consumers were announced before the init response.
    EXPECT_EQ(service_consumers_.size(), workers_);
    open_data_path(posted);
    auto s = call(message_type::start_storage_request);
    if (!s || s->type != message_type::start_storage_response) {
      ADD_FAILURE() << "start: " << (s ? storage::to_string(s->type) : "no answer");
      return false;
    }
    return true;
  }

 private:
  uint32_t workers_;
  std::unique_ptr<storage::comch_control_client> client_;
  std::unique_ptr<core::memory_map> region_;
  std::unique_ptr<core::memory_map> messages_;
  core::buffer_inventory inventory_;
  std::vector<core::buffer*> buffers_;
  service::peer_consumers service_consumers_;
  uint32_t next_id_ = 0;
  std::deque<io_result> responses_;
  uint64_t sent_ = 0;
  std::vector<status> send_errors_;
  bool received_length_ok_ = true;
  std::vector<std::vector<comch::producer_send_task*>> send_tasks_;  // per worker
  // Declared last: destroyed (idle) before the buffers and the channel.
  std::vector<std::unique_ptr<comch::consumer>> rxs_;
  std::vector<std::unique_ptr<comch::producer>> txs_;
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
    host h(p.channel);
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
    host h(p.channel, 2);
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
    host h(p.channel);
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
    host h(p.channel);
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
  host h(p.channel);
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
  host h(p.channel);
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
    host h(p.channel);
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
