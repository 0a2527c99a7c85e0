#include "target/session.hpp"

#include <fmt/format.h>

#include <cstdio>

#include "core/log.hpp"
#include "core/thread.hpp"
#include "storage/stats.hpp"

namespace zc::target {

using storage::message;
using storage::message_type;
using namespace std::chrono_literals;

namespace {

constexpr auto poll_slice = 1s;  // how often a waiting target looks at Ctrl-C

message_type expected_request(int stage) {
  constexpr message_type order[] = {
      message_type::query_storage_request,          message_type::init_storage_request,
      message_type::create_rdma_connection_request, message_type::start_storage_request,
      message_type::stop_storage_request,           message_type::shutdown_request,
  };
  return order[stage];
}

}  // namespace

target_service::target_service(const service_options& config, target_storage& storage,
                               uint32_t block_size)
    : config_(config),
      device_(core::device::open(config.device)),
      storage_(storage),
      block_size_(block_size) {}

target_service::~target_service() {
  teardown();
}

int target_service::run(storage::control_channel& channel) {
  uint64_t sessions = 0;
  while (!exit_ && !core::stop_requested()) {
    status s = storage::wait_until_connected(channel, poll_slice);
    if (s == status::time_out) continue;
    if (!ok(s)) break;
    ZC_LOG_INFO("service connected");
    serve(channel);
    if (!config_.keep_serving) continue;
    // Each session's own block, printed as it ends.
    teardown();
    ++sessions;
    print_stats();
    stats_.clear();
    ZC_LOG_INFO("session {} ended{}", sessions,
                core::stop_requested() ? "" : "; waiting for the next service");
  }
  teardown();
  if (!config_.keep_serving || sessions == 0) print_stats();
  if (data_path_errors_ != 0) {
    ZC_LOG_ERROR("the data path had {} errors", data_path_errors_);
    return 1;
  }
  return 0;
}

void target_service::print_stats() {
  // No session got as far as its workers (Ctrl-C while idle): one empty block per core, so the
  // output always has the reference's per-core blocks.
  if (stats_.empty())
    for (uint32_t cpu : config_.cpus) stats_.push_back(worker_stats{cpu, 0, 0, 0, 0});
  std::vector<storage::core_stats> blocks;
  for (const auto& w : stats_) {
    blocks.push_back({w.cpu, w.operations, std::nullopt, w.pe_hits, w.pe_misses});
  }
  std::fputs(storage::format_core_stats(blocks).c_str(), stdout);
  std::fflush(stdout);
}

void target_service::serve(storage::control_channel& channel) {
  stage_ = stage::query;
  storage::keep_alive alive(config_.keep_alive_timeout);
  while (stage_ != stage::done) {
    auto received = storage::wait_for(channel, poll_slice);
    const auto now = std::chrono::steady_clock::now();
    if (received.code == status::time_out) {
      // Polled empty just now: the silence is real.
      if (!alive.expired(now)) continue;
      ZC_LOG_ERROR(
          "the service sent nothing, not even a keep-alive, for more than {} s: "
          "ending the session",
          alive.timeout().count() / 1000);
      channel.close();
      teardown();
      return;
    }
    if (received.code == status::shutdown) {
      ZC_LOG_INFO("stop requested: ending the session");
      exit_ = true;
      return;
    }
    if (received.failed()) {
      ZC_LOG_ERROR("control connection lost ({}): ending the session",
                   received.text.empty() ? status_name(received.code) : received.text);
      channel.close();
      teardown();
      return;
    }
    alive.heard(now);
    const message& request = *received.msg;
    ZC_LOG_DEBUG("received {} id {}", storage::to_string(request.type), request.message_id);
    message reply = request.type == message_type::keep_alive_request
                        ? storage::make_response(request, message_type::keep_alive_response)
                        : handle(request);
    if (status s = channel.send(reply); !ok(s)) {
      ZC_LOG_ERROR("cannot answer the service: {}", channel.last_error());
      channel.close();
      teardown();
      return;
    }
  }
  // Let the last response go out before the program ends or the next service comes.
  [[maybe_unused]] auto last = storage::wait_for(channel, 100ms);
  if (config_.keep_serving) {
    channel.close();
    return;
  }
  exit_ = true;
}

message target_service::handle(const message& request) {
  if (request.type == message_type::shutdown_request) {
    teardown();
    stage_ = stage::done;
    return storage::make_response(request, message_type::shutdown_response);
  }
  const message_type expected = expected_request(static_cast<int>(stage_));
  if (request.type != expected) {
    return storage::make_unexpected_response(request, expected);
  }
  try {
    switch (stage_) {
      case stage::query:
        return on_query(request);
      case stage::init:
        return on_init(request);
      case stage::connect:
        return on_create_connection(request);
      case stage::start:
        return on_start(request);
      case stage::running:
        return on_stop(request);
      default:
        break;
    }
    throw status_error(status::bad_state, "no request is expected now");
  } catch (const status_error& e) {
    ZC_LOG_ERROR("{} failed: {}", storage::to_string(request.type), e.what());
    return storage::make_error_response(request, e.code(), e.what());
  }
}

message target_service::on_query(const message& request) {
  stage_ = stage::init;
  return storage::make_response(
      request, message_type::query_storage_response,
      storage::query_storage_response_payload{storage_.map().size(), block_size_});
}

message target_service::on_init(const message& request) {
  const auto& init = std::get<storage::init_storage_request_payload>(request.payload);
  if (init.core_count == 0 || init.core_count > config_.cpus.size())
    throw status_error(status::invalid_value,
                       fmt::format("Requested storage to use {} cores but only {} are configured",
                                   init.core_count, config_.cpus.size()));
  if (init.transaction_count == 0 || init.transaction_count > max_transactions)
    throw status_error(status::invalid_value,
                       fmt::format("transaction count {} is outside 1..{}", init.transaction_count,
                                   max_transactions));
  remote_ = core::memory_map::import_rdma(init.mmap_export);
  try {
    for (uint32_t i = 0; i < init.core_count; ++i)
      workers_.push_back(std::make_unique<target_worker>(
          config_.cpus[i], config_.poll_mode, device_, storage_, *remote_, init.transaction_count));
  } catch (const status_error& e) {
    teardown();
    throw status_error(e.code(), std::string("Failed to create worker objects: ") + e.what());
  }
  ZC_LOG_INFO("init: {} workers with {} transactions each, requester region of {} bytes",
              init.core_count, init.transaction_count, remote_->size());
  stage_ = stage::connect;
  return storage::make_response(request, message_type::init_storage_response);
}

message target_service::on_create_connection(const message& request) {
  const auto& conn = std::get<storage::rdma_connection_payload>(request.payload);
  if (conn.context_idx >= workers_.size())
    throw status_error(status::invalid_value,
                       fmt::format("Unable to create RDMA connection for invalid context idx {}",
                                   conn.context_idx));
  auto mine = workers_[conn.context_idx]->connect(conn.role, conn.connection_details);
  bool all = true;
  for (auto& w : workers_) all &= w->connected();
  if (all) stage_ = stage::start;
  return storage::make_response(
      request, message_type::create_rdma_connection_response,
      storage::rdma_connection_payload{conn.context_idx, conn.role, std::move(mine)});
}

message target_service::on_start(const message& request) {
  for (auto& w : workers_)
    if (!w->ready())
      throw status_error(status::bad_state,
                         "Failed to query connections state: not all "
                         "RDMA connections are running");
  for (auto& w : workers_) w->start_data_path();
  stage_ = stage::running;
  ZC_LOG_INFO("data path started on {} workers", workers_.size());
  return storage::make_response(request, message_type::start_storage_response);
}

message target_service::on_stop(const message& request) {
  stop_workers();
  stage_ = stage::stopped;
  return storage::make_response(request, message_type::stop_storage_response);
}

// Once per session: the printed stats are the last session's, but its errors are added to those
// of every earlier session, so that the exit status reports them all.
void target_service::stop_workers() {
  if (workers_.empty() || workers_stopped_) return;
  workers_stopped_ = true;
  stats_.clear();
  for (auto& w : workers_) {
    w->stop();
    stats_.push_back(w->stats());
    const worker_stats& s = stats_.back();
    data_path_errors_ += s.errors;
    if (s.errors != 0)
      ZC_LOG_ERROR("worker on cpu {}: {} operations, {} errors ({} messages refused)", s.cpu,
                   s.operations, s.errors, s.refused_messages);
  }
}

void target_service::teardown() {
  stop_workers();
  workers_.clear();
  workers_stopped_ = false;
  remote_.reset();
}

}  // namespace zc::target
