// The zero-copy service's side of a target session, played by a test or a benchmark against a
// real zcstore_target_rdma: a TCP control client that walks the target through query -> init ->
// create_rdma_connection x (2 x workers) -> start -> stop -> shutdown (REFERENCE_SPEC §2.7), and
// per worker the two rdma contexts of §3.4 (io_data: passive, the target reads and writes the
// driver's exported region through it; io_control: 64-byte IO messages out, responses in).
// Header-only, so tests/integration and bench/ share one copy. Every wait is bounded.
// Thread rules: a service_driver belongs to the thread that made it. A driver_worker's handler
// and submit_here() run on that worker's engine thread; everything else from the owner's thread.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/buffer.hpp"
#include "core/device.hpp"
#include "core/engine_thread.hpp"
#include "core/log.hpp"
#include "core/memory_map.hpp"
#include "rdma/context.hpp"
#include "storage/control_channel.hpp"
#include "storage/control_message.hpp"
#include "storage/io_message.hpp"
#include "storage/keep_alive.hpp"
#include "storage/tcp_control_channel.hpp"

namespace zc::test {

inline constexpr std::chrono::milliseconds driver_timeout{10000};
// Largest message send_raw() takes: well past the 64 bytes of an IO message.
inline constexpr size_t raw_message_capacity = 4096;

// One IO message as the driver sends it. `type` is the raw wire value, so tests can send values
// the target must refuse.
struct io_request {
  uint32_t type = static_cast<uint32_t>(storage::io_message_type::read);
  uint64_t user_data = 0;
  uint32_t io_size = 0;
  uint64_t requester_offset = 0;
  uint64_t storage_offset = 0;
};

// A response as it arrived: the decoded fields and all 64 bytes.
struct io_response {
  uint32_t type = 0;
  uint64_t user_data = 0;
  status result = status::success;
  uint32_t io_size = 0;
  uint64_t requester_offset = 0;
  uint64_t storage_offset = 0;
  size_t length = 0;  // bytes received
  std::array<uint8_t, storage::io_message_size> bytes{};
};

// One service worker: its engine thread and its two rdma contexts towards target worker `index`.
class driver_worker {
 public:
  // Runs on the engine thread for every response, after its receive was posted again.
  using response_handler = std::function<void(driver_worker&, const io_response&)>;

  // `transactions` sends and as many receives; the target should be given the same count and
  // at most half of it should be in flight (REFERENCE_SPEC §3.3: a response can arrive before
  // the target has its receive back).
  driver_worker(uint32_t index, const core::device& device, core::poll_mode mode,
                std::optional<uint32_t> cpu, uint32_t transactions)
      : index_(index), transactions_(transactions), thread_(mode, cpu) {
    thread_.call([&] {
      messages_.assign(size_t(transactions) * 2 * storage::io_message_size, 0);
      messages_map_ = core::memory_map::wrap(messages_.data(), messages_.size(),
                                             core::access::local_read_write);
      inventory_ = std::make_unique<core::buffer_inventory>(transactions * 2 + 1);
      data_ = std::make_unique<rdma::context>(thread_.engine(), device);
      control_ = std::make_unique<rdma::context>(thread_.engine(), device);
      // The target reaches the exported region through io_data only.
      control_->set_permissions(core::access::local_read_only);
      // One more send than transactions: send_raw()'s.
      control_->configure<rdma::send_task>(
          transactions + 1, [this](rdma::send_task& t) { sent(t); },
          [this](rdma::send_task& t) {
            if (t.get_user_data().u64 != transactions_) {
              ++send_errors_;
              last_error_ = t.result();
            }
            sent(t);
          });
      control_->configure<rdma::receive_task>(
          transactions, [this](rdma::receive_task& t) { received(t); },
          [this](rdma::receive_task& t) {
            if (!closing_) {
              ++receive_errors_;
              last_error_ = t.result();
            }
          });
      sends_.resize(transactions);
      receives_.resize(transactions);
      for (uint32_t i = 0; i < transactions; ++i) {
        uint8_t* send_memory = messages_.data() + size_t(i) * storage::io_message_size;
        uint8_t* receive_memory = send_memory + size_t(transactions) * storage::io_message_size;
        throw_if_failed(inventory_->get_by_addr(*messages_map_, send_memory,
                                                storage::io_message_size, sends_[i].message),
                        "driver send buffer");
        throw_if_failed(inventory_->get_by_addr(*messages_map_, receive_memory,
                                                storage::io_message_size, receives_[i].message),
                        "driver receive buffer");
        throw_if_failed(control_->allocate(core::make_user_data(i), sends_[i].task), "send task");
        throw_if_failed(control_->allocate(core::make_user_data(i), receives_[i].task),
                        "receive task");
        sends_[i].task->set_src(*sends_[i].message);
        receives_[i].task->set_dst(*receives_[i].message);
        free_sends_.push_back(transactions - 1 - i);
      }
      raw_memory_.assign(raw_message_capacity, 0);
      raw_map_ = core::memory_map::wrap(raw_memory_.data(), raw_memory_.size(),
                                        core::access::local_read_write);
      throw_if_failed(
          inventory_->get_by_addr(*raw_map_, raw_memory_.data(), raw_memory_.size(), raw_.message),
          "driver raw buffer");
      throw_if_failed(control_->allocate(core::make_user_data(transactions), raw_.task),
                      "raw send task");
      raw_.task->set_src(*raw_.message);
      throw_if_failed(data_->start(), "start io_data context");
      throw_if_failed(control_->start(), "start io_control context");
    });
  }

  ~driver_worker() {
    try {
      thread_.call([&] {
        closing_ = true;
        control_.reset();
        data_.reset();
        sends_.clear();
        receives_.clear();
        inventory_.reset();
        messages_map_.reset();
        raw_map_.reset();
      });
    } catch (const std::exception& e) {
      ZC_LOG_ERROR("driver worker {}: teardown: {}", index_, e.what());
    }
  }

  driver_worker(const driver_worker&) = delete;
  driver_worker& operator=(const driver_worker&) = delete;

  uint32_t index() const noexcept { return index_; }
  uint32_t transactions() const noexcept { return transactions_; }
  core::engine_thread& thread() noexcept { return thread_; }

  std::vector<uint8_t> export_connection(storage::rdma_role role) {
    return thread_.call([&] { return context_for(role).export_connection(); });
  }
  void connect(storage::rdma_role role, std::span<const uint8_t> peer_blob) {
    thread_.call([&] { context_for(role).connect(peer_blob); });
  }
  bool running() {
    return thread_.call([&] {
      return control_->state() == core::context_state::running &&
             data_->state() == core::context_state::running;
    });
  }

  // Replaces the default handler (which keeps every response for responses()). Before start().
  void set_handler(response_handler handler) {
    thread_.call([&] { handler_ = std::move(handler); });
  }

  // Posts every receive; responses can arrive from now on.
  void start() {
    thread_.call([&] {
      for (auto& r : receives_) post(r);
    });
  }

  // Sends one IO message. Engine thread only (from a handler); submit() from elsewhere.
  // no_memory when every send slot is still waiting for its acknowledgement.
  status submit_here(const io_request& request) noexcept {
    if (free_sends_.empty()) return status::no_memory;
    const uint32_t i = free_sends_.back();
    free_sends_.pop_back();
    core::buffer& b = *sends_[i].message;
    storage::io_message_view m(b.head());
    m.clear();
    m.set_type(static_cast<storage::io_message_type>(request.type));
    m.set_user_data(request.user_data);
    m.set_io_size(request.io_size);
    m.set_requester_offset(request.requester_offset);
    m.set_storage_offset(request.storage_offset);
    (void)b.set_data(b.head(), storage::io_message_size);
    const status s = control_->submit(*sends_[i].task);
    if (!ok(s)) {
      free_sends_.push_back(i);
      return s;
    }
    ++in_flight_;
    return s;
  }
  status submit(const io_request& request) {
    return thread_.call([&] { return submit_here(request); });
  }
  // Sends `bytes` as one io_control message of any length up to raw_message_capacity (for
  // messages the target must refuse). Not counted in send_errors(); raw_result() has the outcome.
  status send_raw(std::span<const uint8_t> bytes) {
    return thread_.call([&] {
      if (bytes.size() > raw_memory_.size() || raw_busy_) return status::no_memory;
      std::memcpy(raw_memory_.data(), bytes.data(), bytes.size());
      (void)raw_.message->set_data(raw_.message->head(), bytes.size());
      raw_result_.reset();
      const status s = control_->submit(*raw_.task);
      raw_busy_ = ok(s);
      return s;
    });
  }
  // The completion status of the last send_raw(), once the target acknowledged or refused it.
  std::optional<status> raw_result(std::chrono::milliseconds timeout = driver_timeout) {
    thread_.wait_until([this] { return raw_result_.has_value(); }, timeout);
    return thread_.call([&] { return raw_result_; });
  }
  // Stops one of this worker's contexts (the other keeps running), as a peer that loses one of
  // its two connections would.
  void stop_context(storage::rdma_role role) {
    thread_.call([&] { (void)context_for(role).stop(); });
  }

  // Sends every request; throws if one cannot be submitted.
  void submit_all(std::span<const io_request> requests) {
    thread_.call([&] {
      for (const auto& r : requests)
        throw_if_failed(submit_here(r), fmt::format("worker {}: IO submit", index_));
    });
  }

  // True once `count` responses have been kept (default handler) within `timeout`.
  bool wait_responses(size_t count, std::chrono::milliseconds timeout = driver_timeout) {
    return thread_.wait_until([this, count] { return responses_.size() >= count; }, timeout);
  }
  // True once nothing is in flight and every send was acknowledged.
  bool wait_idle(std::chrono::milliseconds timeout = driver_timeout) {
    return thread_.wait_until(
        [this] { return in_flight_ == 0 && free_sends_.size() == sends_.size(); }, timeout);
  }
  std::vector<io_response> responses() {
    return thread_.call([&] { return responses_; });
  }
  std::vector<io_response> take_responses() {
    return thread_.call([&] { return std::exchange(responses_, {}); });
  }
  // Engine thread only.
  uint32_t in_flight_here() const noexcept { return in_flight_; }
  uint64_t send_errors() {
    return thread_.call([&] { return send_errors_; });
  }
  uint64_t receive_errors() {
    return thread_.call([&] { return receive_errors_; });
  }
  status last_error() {
    return thread_.call([&] { return last_error_; });
  }

 private:
  struct send_slot {
    core::buffer* message = nullptr;
    rdma::send_task* task = nullptr;
  };
  struct receive_slot {
    core::buffer* message = nullptr;
    rdma::receive_task* task = nullptr;
  };

  rdma::context& context_for(storage::rdma_role role) {
    return role == storage::rdma_role::io_control ? *control_ : *data_;
  }

  void sent(rdma::send_task& t) {
    const auto i = static_cast<uint32_t>(t.get_user_data().u64);
    if (i == transactions_) {
      raw_busy_ = false;
      raw_result_ = t.result();
      return;
    }
    free_sends_.push_back(i);
  }

  void post(receive_slot& r) {
    (void)r.message->set_data(r.message->head(), 0);
    if (const status s = control_->submit(*r.task); !ok(s)) {
      ++receive_errors_;
      last_error_ = s;
    }
  }

  void received(rdma::receive_task& t) {
    receive_slot& r = receives_[t.get_user_data().u64];
    io_response out;
    out.length = std::min(t.received_length(), out.bytes.size());
    std::memcpy(out.bytes.data(), r.message->head(), out.length);
    storage::io_message_view m(out.bytes.data());
    out.type = static_cast<uint32_t>(m.type());
    out.user_data = m.user_data();
    out.result = m.result();
    out.io_size = m.io_size();
    out.requester_offset = m.requester_offset();
    out.storage_offset = m.storage_offset();
    if (in_flight_ > 0) --in_flight_;
    post(r);
    if (handler_)
      handler_(*this, out);
    else
      responses_.push_back(out);
  }

  uint32_t index_;
  uint32_t transactions_;
  core::engine_thread thread_;
  // Engine-thread state below.
  std::vector<uint8_t> messages_;
  std::unique_ptr<core::memory_map> messages_map_;
  std::unique_ptr<core::buffer_inventory> inventory_;
  std::unique_ptr<rdma::context> data_;
  std::unique_ptr<rdma::context> control_;
  std::vector<send_slot> sends_;
  std::vector<receive_slot> receives_;
  std::vector<uint8_t> raw_memory_;
  std::unique_ptr<core::memory_map> raw_map_;
  send_slot raw_;
  bool raw_busy_ = false;
  std::optional<status> raw_result_;
  std::vector<uint32_t> free_sends_;
  response_handler handler_;
  std::vector<io_response> responses_;
  uint32_t in_flight_ = 0;
  uint64_t send_errors_ = 0;
  uint64_t receive_errors_ = 0;
  status last_error_ = status::success;
  bool closing_ = false;
};

struct driver_options {
  std::string device = "tcp";  // -d of the target: tcp, sm, auto
  core::poll_mode mode = core::poll_mode::event;
  std::vector<uint32_t> cpus;  // worker i is pinned to cpus[i % size]; none when empty
  std::chrono::milliseconds timeout = driver_timeout;  // connect and every control reply
};

class service_driver {
 public:
  // Connects to the target on 127.0.0.1:port (retrying while it is not listening yet).
  explicit service_driver(uint16_t port, driver_options options = {})
      : options_(std::move(options)),
        device_(core::device::open(options_.device)),
        channel_(std::make_unique<storage::tcp_client_channel>(
            fmt::format("127.0.0.1:{}", port),
            std::chrono::steady_clock::now() + options_.timeout)) {}

  ~service_driver() {
    workers_.clear();  // before the region they give the target access to
    region_.reset();
  }

  service_driver(const service_driver&) = delete;
  service_driver& operator=(const service_driver&) = delete;

  // ---- control plane, message by message

  uint32_t next_id() noexcept { return next_id_++; }
  void send(const storage::message& msg) {
    if (const status s = channel_->send(msg); !ok(s)) throw status_error(s, channel_->last_error());
  }
  // The next message from the target; throws status_error when none comes in time or the
  // connection fails (code = what wait_for() said).
  storage::message receive() { return receive(options_.timeout); }
  storage::message receive(std::chrono::milliseconds timeout) {
    auto r = storage::wait_for(*channel_, timeout);
    if (!r.msg) throw status_error(r.code, "no reply from the target: " + r.text);
    return std::move(*r.msg);
  }
  // Sends a request of `type` with the next message id (correlation id = message id) and returns
  // whatever comes back.
  storage::message request(storage::message_type type,
                           storage::message_payload payload = storage::empty_payload{}) {
    const uint32_t id = next_id();
    send(storage::message{type, id, id, std::move(payload)});
    return receive();
  }
  // As request(), but the reply must be `want` with the request's ids; an error_response becomes
  // a status_error with the target's code and text.
  storage::message call(storage::message_type type, storage::message_type want,
                        storage::message_payload payload = storage::empty_payload{}) {
    const uint32_t id = next_id_;
    storage::message reply = request(type, std::move(payload));
    if (reply.type == storage::message_type::error_response) {
      const auto& e = std::get<storage::error_response_payload>(reply.payload);
      throw status_error(e.error_code,
                         fmt::format("{} failed: {}", storage::to_string(type), e.message));
    }
    if (reply.type != want || reply.message_id != id || reply.correlation_id != id)
      throw status_error(
          status::unexpected,
          fmt::format("{} answered with {} id {}/{} (expected {} id {})", storage::to_string(type),
                      storage::to_string(reply.type), reply.message_id, reply.correlation_id,
                      storage::to_string(want), id));
    return reply;
  }

  // ---- the sequence

  storage::query_storage_response_payload query() {
    auto reply = call(storage::message_type::query_storage_request,
                      storage::message_type::query_storage_response);
    return std::get<storage::query_storage_response_payload>(reply.payload);
  }

  // Allocates and exports the requester region, creates `cores` workers and sends init.
  void init(uint32_t transactions, uint32_t cores, size_t region_size) {
    prepare(transactions, cores, region_size);
    call(storage::message_type::init_storage_request, storage::message_type::init_storage_response,
         storage::init_storage_request_payload{transactions, cores, region_export_});
  }
  // The local half of init (region + workers) without telling the target.
  void prepare(uint32_t transactions, uint32_t cores, size_t region_size) {
    workers_.clear();
    region_ =
        core::memory_map::allocate(region_size, core::access::local_read_write | core::rdma_all);
    region_export_ = region_->export_rdma();
    for (uint32_t i = 0; i < cores; ++i) {
      std::optional<uint32_t> cpu;
      if (!options_.cpus.empty()) cpu = options_.cpus[i % options_.cpus.size()];
      workers_.push_back(
          std::make_unique<driver_worker>(i, device_, options_.mode, cpu, transactions));
    }
  }

  // One create_rdma_connection round trip: export, ask, connect to the target's blob.
  void connect(uint32_t worker, storage::rdma_role role) {
    driver_worker& w = *workers_.at(worker);
    auto mine = w.export_connection(role);
    auto reply = call(storage::message_type::create_rdma_connection_request,
                      storage::message_type::create_rdma_connection_response,
                      storage::rdma_connection_payload{worker, role, std::move(mine)});
    const auto& theirs = std::get<storage::rdma_connection_payload>(reply.payload);
    if (theirs.context_idx != worker || theirs.role != role)
      throw status_error(status::unexpected,
                         fmt::format("connection response for worker {} {} names worker {} {}",
                                     worker, storage::to_string(role), theirs.context_idx,
                                     storage::to_string(theirs.role)));
    w.connect(role, theirs.connection_details);
  }
  // io_data then io_control for every worker, in order (REFERENCE_SPEC §2.7).
  void connect_all() {
    for (uint32_t i = 0; i < workers_.size(); ++i) {
      connect(i, storage::rdma_role::io_data);
      connect(i, storage::rdma_role::io_control);
    }
  }

  // Posts the receives of every worker, then start_storage.
  void start() {
    for (auto& w : workers_) w->start();
    call(storage::message_type::start_storage_request,
         storage::message_type::start_storage_response);
  }
  void stop() {
    call(storage::message_type::stop_storage_request, storage::message_type::stop_storage_response);
  }
  void shutdown() {
    call(storage::message_type::shutdown_request, storage::message_type::shutdown_response);
  }

  // query, init, connections and start in one go. Returns the query's answer.
  storage::query_storage_response_payload open_session(uint32_t transactions, uint32_t cores,
                                                       size_t region_size) {
    auto geometry = query();
    init(transactions, cores, region_size);
    connect_all();
    start();
    return geometry;
  }

  // Drops the control connection, as a client that goes away would.
  void disconnect() noexcept { channel_->close(); }

  // Waits `how_long` while the data path runs, keeping the session alive as a service does: the
  // target ends a session whose service sent nothing for its keep-alive timeout (10 s by
  // default), so a keep_alive_request goes every keep_alive_interval and the answers are read.
  // Throws status_error when the connection fails or the target says anything else.
  void keep_alive_for(std::chrono::nanoseconds how_long) {
    using clock = std::chrono::steady_clock;
    const auto end = clock::now() + how_long;
    for (auto now = clock::now(); now < end; now = clock::now()) {
      if (now >= next_keep_alive_) {
        send(storage::make_keep_alive());
        next_keep_alive_ = now + storage::keep_alive_interval;
      }
      const auto wait =
          std::chrono::ceil<std::chrono::milliseconds>(std::min(end, next_keep_alive_) - now);
      auto r = storage::wait_for(*channel_, wait);
      if (r.msg && r.msg->type != storage::message_type::keep_alive_response)
        throw status_error(status::unexpected, "the target sent " +
                                                   std::string(storage::to_string(r.msg->type)) +
                                                   " during the data path");
      if (!r.msg && r.code != status::time_out) throw status_error(r.code, r.text);
    }
  }

  // ---- state

  storage::tcp_client_channel& channel() noexcept { return *channel_; }
  const core::device& device() const noexcept { return device_; }
  size_t worker_count() const noexcept { return workers_.size(); }
  driver_worker& worker(size_t i) { return *workers_.at(i); }
  core::memory_map& region() { return *region_; }
  uint8_t* region_data() { return region_->data(); }
  const std::vector<uint8_t>& region_export() const noexcept { return region_export_; }

 private:
  driver_options options_;
  core::device device_;
  std::unique_ptr<storage::tcp_client_channel> channel_;
  std::unique_ptr<core::memory_map> region_;
  std::vector<uint8_t> region_export_;
  std::vector<std::unique_ptr<driver_worker>> workers_;
  uint32_t next_id_ = 0;
  std::chrono::steady_clock::time_point next_keep_alive_{};
};

}  // namespace zc::test
