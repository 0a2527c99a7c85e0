// A service played by a test thread for the host layer: a comch control server that answers the
// session's requests, and per worker a consumer and a producer that answer each IO message the
// way the test says (success, another result, nothing, twice, with a changed field). It follows
// the pairing rule: its consumers are started in worker order, and it answers worker i on the
// i-th smallest consumer id the host announced. Every wait is bounded.
// Thread rules: construct, configure and destroy from the test thread; the rest runs on the
// service's own thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "comch/consumer.hpp"
#include "comch/producer.hpp"
#include "core/buffer.hpp"
#include "core/memory_map.hpp"
#include "storage/comch_control_channel.hpp"
#include "storage/io_message.hpp"

namespace zc::test {

// What the fake service does with one IO message: returns false to drop it, else edits the
// response in place (type and result are already set to result / success).
using io_answer = std::function<bool(storage::io_message_view& response)>;

class fake_service {
 public:
  fake_service(std::string name, uint32_t block_size = 4096, uint64_t capacity = 1 << 20)
      : name_(std::move(name)), block_size_(block_size), capacity_(capacity) {
    thread_ = std::thread([this] { run(); });
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, std::chrono::seconds(10), [this] { return listening_; });
  }
  ~fake_service() {
    quit_ = true;
    thread_.join();
  }

  // How IOs are answered from now on (default: success, unchanged).
  void answer_with(io_answer f) {
    std::lock_guard lock(mutex_);
    answer_ = std::move(f);
  }
  // Answer each IO twice (a duplicate the host must ignore).
  void answer_twice(bool on) { twice_ = on; }
  // Ends the connection to the host (as a service that dies would).
  void disconnect() { disconnect_ = true; }

  uint64_t ios() const { return ios_.load(); }
  // IOs that arrived on worker `i`'s consumer.
  uint64_t lane_ios(uint32_t i) const { return i < 8 ? lane_ios_[i].load() : 0; }
  std::vector<storage::message_type> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  // The init payload the host sent, once it did.
  storage::init_storage_request_payload init() {
    std::lock_guard lock(mutex_);
    return init_;
  }

 private:
  struct lane {
    std::unique_ptr<core::memory_map> map;
    core::buffer_inventory inventory{256};
    std::unique_ptr<comch::consumer> rx;
    std::unique_ptr<comch::producer> tx;
    std::vector<core::buffer*> responses;  // free response buffers
    uint32_t peer = 0;
    uint32_t index = 0;
  };

  void run() {
    storage::comch_control_server server("", name_);
    {
      std::lock_guard lock(mutex_);
      listening_ = true;
    }
    cv_.notify_all();
    std::set<uint32_t> host_consumers;
    while (!quit_) {
      if (disconnect_.exchange(false)) {
        server.close();
        stop_lanes(server);
      }
      auto r = storage::wait_for(server, std::chrono::milliseconds(1),
                                 storage::on_stop_request::carry_on);
      while (auto e = server.take_consumer_event()) {
        if (e->what == storage::consumer_event::kind::created)
          host_consumers.insert(e->id);
        else
          host_consumers.erase(e->id);
      }
      if (!r.msg) continue;
      const auto& m = *r.msg;
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(m.type);
      }
      using storage::message_type;
      storage::message reply;
      switch (m.type) {
        case message_type::query_storage_request:
          reply = storage::make_response(
              m, message_type::query_storage_response,
              storage::query_storage_response_payload{capacity_, block_size_});
          break;
        case message_type::init_storage_request: {
          const auto& init = std::get<storage::init_storage_request_payload>(m.payload);
          {
            std::lock_guard lock(mutex_);
            init_ = init;
          }
          region_ = core::memory_map::import_pci(init.mmap_export);
          storage_.assign(capacity_, std::byte{0});
          for (uint32_t i = 0; i < init.core_count; ++i)
            add_lane(server, init.transaction_count * 2);
          reply = storage::make_response(m, message_type::init_storage_response);
          break;
        }
        case message_type::start_storage_request: {
          auto id = host_consumers.begin();
          for (auto& l : lanes_) l->peer = id == host_consumers.end() ? 0 : *id++;
          reply = storage::make_response(m, message_type::start_storage_response);
          break;
        }
        case message_type::stop_storage_request:
          stop_lanes(server);
          reply = storage::make_response(m, message_type::stop_storage_response);
          break;
        default:
          reply = storage::make_response(m, message_type::shutdown_response);
          break;
      }
      (void)server.send(reply);
    }
    stop_lanes(server);
  }

  void stop_lanes(storage::comch_control_server& server) {
    for (auto& l : lanes_) {
      (void)l->rx->stop();
      (void)l->tx->stop();
    }
    server.engine().run_until(
        [&] {
          for (auto& l : lanes_)
            if (l->rx->state() != core::context_state::idle ||
                l->tx->state() != core::context_state::idle)
              return false;
          return true;
        },
        std::chrono::seconds(5));
    lanes_.clear();
  }

 public:
  // The fake storage's bytes (for checks after the session's stop).
  std::vector<std::byte> storage_bytes() const { return storage_; }

 private:
  void add_lane(storage::comch_control_server& server, uint32_t n) {
    auto l = std::make_unique<lane>();
    l->map =
        core::memory_map::allocate(size_t(2) * n * storage::io_message_size,
                                   core::access::local_read_write | core::access::pci_read_write);
    lane* raw = l.get();
    l->index = static_cast<uint32_t>(lanes_.size());
    l->rx = std::make_unique<comch::consumer>(
        server.engine(), *server.connection(),
        comch::consumer_config{
            .buffers = l->map.get(),
            .post_recv_tasks = n,
            .on_recv = [this, raw](comch::consumer_post_recv_task& t) { on_request(*raw, t); },
            .on_recv_error = [](comch::consumer_post_recv_task&) {}});
    l->tx = std::make_unique<comch::producer>(
        server.engine(), *server.connection(),
        comch::producer_config{.send_tasks = n,
                               .on_send_done =
                                   [raw](comch::producer_send_task& t) {
                                     raw->responses.push_back(&t.buf());
                                     t.free();
                                   },
                               .on_send_error =
                                   [raw](comch::producer_send_task& t) {
                                     raw->responses.push_back(&t.buf());
                                     t.free();
                                   }});
    (void)l->rx->start();
    (void)l->tx->start();
    for (uint32_t i = 0; i < 2 * n; ++i) {
      core::buffer* b = nullptr;
      (void)l->inventory.get_by_addr(*l->map, l->map->data() + i * storage::io_message_size,
                                     storage::io_message_size, b);
      if (i < n) {
        (void)l->rx->submit(*l->rx->allocate_post_recv(*b));
      } else {
        l->responses.push_back(b);
      }
    }
    lanes_.push_back(std::move(l));
  }

  void on_request(lane& l, comch::consumer_post_recv_task& t) {
    ios_.fetch_add(1);
    if (l.index < 8) lane_ios_[l.index].fetch_add(1);
    io_answer answer;
    {
      std::lock_guard lock(mutex_);
      answer = answer_;
    }
    move_data(storage::io_message_view(t.buf().data()));
    const int copies = twice_ ? 2 : 1;
    for (int c = 0; c < copies && !l.responses.empty(); ++c) {
      core::buffer* b = l.responses.back();
      std::memcpy(b->head(), t.buf().data(), storage::io_message_size);
      storage::io_message_view v(b->head());
      v.set_type(storage::io_message_type::result);
      v.set_result(status::success);
      if (answer && !answer(v)) break;
      l.responses.pop_back();
      (void)b->set_data(b->head(), storage::io_message_size);
      auto* s = l.tx->allocate_send(*b, l.peer);
      if (s == nullptr || !ok(l.tx->submit(*s))) {
        l.responses.push_back(b);
        if (s != nullptr) s->free();
      }
    }
    t.buf().set_data(t.buf().head(), 0);
    (void)l.rx->submit(t);
  }

  // What a target would do through the re-exported region: reads land in the host's pages,
  // writes come from them. Out-of-range IOs move nothing.
  void move_data(const storage::io_message_view& m) {
    const uint64_t size = m.io_size(), req = m.requester_offset(), st = m.storage_offset();
    if (region_ == nullptr || size > region_->size() || req > region_->size() - size ||
        size > storage_.size() || st > storage_.size() - size)
      return;
    if (m.type() == storage::io_message_type::read)
      std::memcpy(region_->data() + req, storage_.data() + st, size);
    else if (m.type() == storage::io_message_type::write)
      std::memcpy(storage_.data() + st, region_->data() + req, size);
  }

  std::string name_;
  uint32_t block_size_;
  uint64_t capacity_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool listening_ = false;
  std::atomic<bool> quit_{false};
  std::atomic<bool> twice_{false};
  std::atomic<bool> disconnect_{false};
  std::atomic<uint64_t> ios_{0};
  std::atomic<uint64_t> lane_ios_[8] = {};
  io_answer answer_;
  std::vector<storage::message_type> requests_;
  storage::init_storage_request_payload init_;
  std::vector<std::unique_ptr<lane>> lanes_;
  std::unique_ptr<core::memory_map> region_;  // the host's IO region, imported
  std::vector<std::byte> storage_;
  std::thread thread_;
};

}  // namespace zc::test
