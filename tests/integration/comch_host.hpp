// A minimal initiator for tests that drive a service directly: the comch control client (mid ==
// cid, as the initiator sends them), an IO region exported for PCI, and per host worker a comch
// consumer and producer paired by the rule of storage/peer_consumers.hpp; IO messages with any
// field values, answers collected in arrival order. Every wait is bounded. Header-only, for
// tests/integration. Thread rules: the test's thread (the channel's engine is polled by pump()).
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comch/consumer.hpp"
#include "comch/producer.hpp"
#include "core/buffer.hpp"
#include "core/memory_map.hpp"
#include "storage/comch_control_channel.hpp"
#include "storage/io_message.hpp"
#include "storage/peer_consumers.hpp"

namespace zc::test {

// T per host worker: the service uses 2T.
inline constexpr uint32_t transactions = 4;
inline constexpr std::chrono::seconds host_start_timeout{20};
inline constexpr std::chrono::seconds host_response_timeout{15};

// The storage as the host must see it.
struct host_geometry {
  uint32_t block_size = 0;
  uint32_t block_count = 0;
};

namespace host_detail {
using storage::io_message_size;
using storage::io_message_type;
using storage::message;
using storage::message_type;
using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct io_result {
  uint32_t worker = 0;  // the host worker whose consumer it reached
  std::array<uint8_t, io_message_size> bytes{};
  storage::io_message_view view() { return storage::io_message_view(bytes.data()); }
};

// The initiator's side: control client, IO region, per worker a consumer and a producer.
class host {
 public:
  // geometry: what the service must report at query (the host's IO region is that big).
  host(const std::string& channel, host_geometry geometry, uint32_t workers = 1)
      : workers_(workers),
        geometry_(geometry),
        client_(std::make_unique<storage::comch_control_client>(
            "auto", channel, clock_type::now() + host_start_timeout)),
        region_(core::memory_map::allocate(size_t(geometry.block_size) * geometry.block_count,
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
  const storage::peer_consumers& service_consumers() const { return service_consumers_; }

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
    const auto deadline = clock_type::now() + host_response_timeout;
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
    const auto deadline = clock_type::now() + host_response_timeout;
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
    (void)b.set_data(b.head(), send_length_);
    // Host worker i sends to the service consumer with the i-th smallest id.
    const auto target = service_consumers_.for_worker(worker);
    if (!target) return std::nullopt;
    comch::producer_send_task* send_task = send_tasks_[worker][0];
    send_task->set(b, *target);
    const uint64_t sent_before = sent_;
    const auto deadline = clock_type::now() + host_response_timeout;
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
  // The length of the IO messages io() sends from now on (a hostile host's short ones).
  void set_send_length(uint32_t length) { send_length_ = length; }
  const std::vector<status>& send_errors() const { return send_errors_; }
  std::deque<io_result>& responses() { return responses_; }

  // Query -> init -> (host data path) -> start, as an initiator does; false on any failure.
  bool walk_to_running(uint32_t posted = 2 * transactions) {
    auto q = call(message_type::query_storage_request);
    if (!q || q->type != message_type::query_storage_response) return false;
    const auto& geometry = std::get<storage::query_storage_response_payload>(q->payload);
    EXPECT_EQ(geometry.total_size, uint64_t(geometry_.block_size) * geometry_.block_count);
    EXPECT_EQ(geometry.block_size, geometry_.block_size);
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
  host_geometry geometry_;
  std::unique_ptr<storage::comch_control_client> client_;
  std::unique_ptr<core::memory_map> region_;
  std::unique_ptr<core::memory_map> messages_;
  core::buffer_inventory inventory_;
  std::vector<core::buffer*> buffers_;
  storage::peer_consumers service_consumers_;
  uint32_t next_id_ = 0;
  std::deque<io_result> responses_;
  uint64_t sent_ = 0;
  std::vector<status> send_errors_;
  bool received_length_ok_ = true;
  uint32_t send_length_ = io_message_size;
  std::vector<std::vector<comch::producer_send_task*>> send_tasks_;  // per worker
  // Declared last: destroyed (idle) before the buffers and the channel.
  std::vector<std::unique_ptr<comch::consumer>> rxs_;
  std::vector<std::unique_ptr<comch::producer>> txs_;
};

}  // namespace host_detail

using host_detail::host;
using host_detail::io_result;

}  // namespace zc::test
