#include "host/session.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "core/log.hpp"
#include "core/thread.hpp"

namespace zc::host {

using storage::message;
using storage::message_type;
using namespace std::chrono_literals;

namespace {

using clock = std::chrono::steady_clock;

uint64_t page_round(uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (bytes > UINT64_MAX - page) throw status_error(status::invalid_value, "IO region too large");
  return (bytes + page - 1) / page * page;
}

// The channel's failure as a status_error; text for the log and the caller.
[[noreturn]] void throw_failure(const storage::receive_result& r, std::string_view waiting_for) {
  if (r.code == status::time_out)
    throw status_error(status::time_out, fmt::format("Timed out waiting for {}", waiting_for));
  if (r.code == status::shutdown)
    throw status_error(status::shutdown, fmt::format("Stopped while waiting for {}", waiting_for));
  throw status_error(r.code, fmt::format("Lost the service while waiting for {}: {}", waiting_for,
                                         r.text.empty() ? status_name(r.code) : r.text));
}

}  // namespace

session::session(const session_options& options)
    : options_(options), alive_(options.keep_alive_timeout) {
  try {
    channel_ = std::make_unique<storage::comch_control_client>(
        options_.device, options_.channel_name, clock::now() + options_.control_timeout);
  } catch (const status_error& e) {
    if (e.code() == status::time_out)
      throw status_error(status::time_out, "Timed out trying to connect to storage");
    throw;
  }
  ZC_LOG_INFO("connected to the service on channel {}", options_.channel_name);
  alive_.restart(clock::now());
}

session::~session() {
  // The workers' endpoints live on the channel's connection: they go first.
  workers_.clear();
  channel_.reset();
}

message session::request(message_type type, message_type expected, storage::message_payload payload,
                         std::chrono::milliseconds timeout, storage::on_stop_request policy) {
  const uint32_t id = next_id_++;
  const message out{type, id, id, std::move(payload)};
  if (status s = channel_->send(out); !ok(s))
    throw status_error(
        s, fmt::format("Cannot send {}: {}", storage::to_string(type), channel_->last_error()));
  const auto deadline = clock::now() + timeout;
  const std::string waiting_for = fmt::format("{} id: {}", storage::to_string(expected), id);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    auto r = storage::wait_for(*channel_, std::max(left, 0ms), policy);
    take_consumer_events();
    if (r.failed()) throw_failure(r, waiting_for);
    const message& in = *r.msg;
    alive_.heard(clock::now());
    if (in.message_id == storage::keep_alive_message_id) continue;  // a late keep-alive answer
    if (in.message_id != id)
      throw status_error(status::unexpected,
                         fmt::format("Received unexpected {} id: {} while waiting for {}",
                                     storage::to_string(in.type), in.message_id, waiting_for));
    if (in.type == message_type::error_response) {
      const auto& e = std::get<storage::error_response_payload>(in.payload);
      throw status_error(e.error_code, fmt::format("{} id: {} failed!: {}",
                                                   storage::to_string(expected), id, e.message));
    }
    if (in.type != expected)
      throw status_error(status::unexpected,
                         fmt::format("Received unexpected {} While waiting for {}",
                                     storage::to_string(in.type), waiting_for));
    return in;
  }
}

void session::take_consumer_events() {
  while (auto e = channel_->take_consumer_event()) service_consumers_.apply(*e);
}

storage_info session::query() {
  auto reply = request(message_type::query_storage_request, message_type::query_storage_response,
                       storage::empty_payload{}, options_.control_timeout);
  const auto& q = std::get<storage::query_storage_response_payload>(reply.payload);
  if (q.total_size == 0 || q.block_size == 0)
    throw status_error(status::invalid_value,
                       fmt::format("The storage reports a capacity of {} with a block size of {}",
                                   q.total_size, q.block_size));
  ZC_LOG_INFO("Storage reports capacity of: {} using a block size of: {}", q.total_size,
              q.block_size);
  return {q.total_size, q.block_size};
}

void session::init(uint64_t region_size, uint32_t transaction_count, uint32_t core_count) {
  region_ = core::memory_map::allocate(
      page_round(region_size), core::access::local_read_write | core::access::pci_read_write |
                                   core::access::rdma_read | core::access::rdma_write);
  ZC_LOG_INFO("Init storage to use {} cores with {} transactions each", core_count,
              transaction_count);
  // Inside this request the service initialises its targets and makes two rdma connections per
  // worker, each step bounded by the control timeout on its side: the wait covers all of them.
  request(
      message_type::init_storage_request, message_type::init_storage_response,
      storage::init_storage_request_payload{transaction_count, core_count, region_->export_pci()},
      (2 + 3 * core_count) * options_.control_timeout);
}

worker& session::add_worker(uint32_t cpu, queue_options options) {
  const auto index = static_cast<uint32_t>(workers_.size());
  comch::connection* conn = channel_->connection();
  if (conn == nullptr) throw status_error(status::not_connected, "Lost the service");
  workers_.push_back(std::make_unique<worker>(index, cpu, options_.poll_mode, *conn,
                                              std::move(options), options_.control_timeout));
  return *workers_.back();
}

void session::wait_ready() {
  const auto deadline = clock::now() + options_.control_timeout;
  bool paired = false;
  for (;;) {
    take_consumer_events();
    if (!paired && service_consumers_.ready(workers_.size())) {
      for (auto& w : workers_) w->pair(*service_consumers_.for_worker(w->index()));
      paired = true;
    }
    if (paired &&
        std::all_of(workers_.begin(), workers_.end(), [](auto& w) { return w->ready(); })) {
      ZC_LOG_INFO("Async init complete");
      return;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now());
    if (left <= 0ms)
      throw status_error(status::time_out, "Timed out waiting for remote objects to start");
    auto r = storage::wait_for(*channel_, std::min(left, 10ms));
    if (r.msg)
      throw status_error(status::bad_state, fmt::format("Received unexpected {} while initialising",
                                                        storage::to_string(r.msg->type)));
    if (r.failed() && r.code != status::time_out) throw_failure(r, "remote objects to start");
  }
}

void session::start() {
  request(message_type::start_storage_request, message_type::start_storage_response,
          storage::empty_payload{}, options_.control_timeout);
}

std::pair<status, worker*> session::queue_failure() {
  for (auto& w : workers_) {
    const status why =
        w->thread().call([q = w->queue()] { return q->failure(); }, options_.control_timeout);
    if (!ok(why)) return {why, w.get()};
  }
  return {status::success, nullptr};
}

status session::watch(std::chrono::milliseconds slice) {
  if (const auto now = clock::now(); alive_.send_due(now)) {
    if (status s = channel_->send(storage::make_keep_alive()); !ok(s)) {
      ZC_LOG_ERROR("lost the service: {}", channel_->last_error());
      return s;
    }
    alive_.sent(now);
  }
  auto r = storage::wait_for(*channel_, slice, storage::on_stop_request::carry_on);
  take_consumer_events();
  const auto now = clock::now();
  if (r.msg) {
    alive_.heard(now);
    if (r.msg->type == message_type::keep_alive_response &&
        r.msg->message_id == storage::keep_alive_message_id)
      return status::success;
    ZC_LOG_ERROR("the service sent {} id {} unrequested", storage::to_string(r.msg->type),
                 r.msg->message_id);
    return status::unexpected;
  }
  if (r.code == status::time_out) {
    if (!alive_.expired(now)) return status::success;
    ZC_LOG_ERROR("lost the service: it answered no keep-alive for more than {} s",
                 alive_.timeout().count() / 1000);
    return status::time_out;
  }
  if (r.failed())
    ZC_LOG_ERROR("lost the service: {}", r.text.empty() ? status_name(r.code) : r.text);
  return r.code;
}

void session::stop() {
  request(message_type::stop_storage_request, message_type::stop_storage_response,
          storage::empty_payload{}, options_.control_timeout, storage::on_stop_request::carry_on);
}

void session::shutdown() {
  for (auto& w : workers_) w->stop();
  request(message_type::shutdown_request, message_type::shutdown_response, storage::empty_payload{},
          options_.control_timeout, storage::on_stop_request::carry_on);
  // The service's consumers expired at its stop; the connection may close right after this
  // answer, which also expires them.
  const auto deadline = clock::now() + options_.control_timeout;
  while (!service_consumers_.empty() && clock::now() < deadline) {
    auto r = storage::wait_for(*channel_, 10ms, storage::on_stop_request::carry_on);
    take_consumer_events();
    if (r.failed() && r.code != status::time_out) break;
  }
  if (!service_consumers_.empty() && channel_->is_connected())
    ZC_LOG_WARN("{} consumers of the service had not expired after shutdown",
                service_consumers_.size());
}

}  // namespace zc::host
