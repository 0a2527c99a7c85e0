#include "service/zero_copy_session.hpp"

#include <fmt/format.h>

#include "core/log.hpp"
#include "core/thread.hpp"
#include "service/worker_connections.hpp"

#include <exception>
#include <optional>

namespace zc::service {

using storage::message;
using storage::message_type;

zero_copy_session::zero_copy_session(zero_copy_options options, const core::device& device,
                                     target_set& targets, client_link& client)
    : options_(std::move(options)), device_(device), targets_(targets), client_(client) {}

zero_copy_session::~zero_copy_session() {
  teardown();
}

message zero_copy_session::forward(const message& request, message_type type,
                                   storage::message_payload payload, message_type expected) {
  last_correlation_id_ = request.correlation_id;
  return on_targets([&] {
    return targets_.request(0, {type, request.correlation_id, std::move(payload)}, expected);
  });
}

message zero_copy_session::on_query(const message& request) {
  // The target's payload, or its error, with the client's ids (§2.7 step 2).
  message reply = forward(request, message_type::query_storage_request, storage::empty_payload{},
                          message_type::query_storage_response);
  if (const auto* g = std::get_if<storage::query_storage_response_payload>(&reply.payload))
    geometry_ = *g;
  return relay(reply, request);
}

message zero_copy_session::on_init(const message& request) {
  const auto* init = std::get_if<storage::init_storage_request_payload>(&request.payload);
  if (init == nullptr) throw status_error(status::invalid_value, "init without its payload");
  if (!workers_.empty() || host_map_)
    throw status_error(status::bad_state, "the storage is initialised already");
  if (init->core_count == 0 || init->core_count > options_.cpus.size())
    throw status_error(status::invalid_value,
                       fmt::format("Unable to create {} threads as only {} were defined",
                                   init->core_count, options_.cpus.size()));
  // N = 2T (REFERENCE_SPEC §3.3) must fit the target's per-worker limit.
  if (init->transaction_count == 0 || init->transaction_count > max_worker_transactions / 2)
    throw status_error(status::invalid_value,
                       fmt::format("transaction count {} is outside 1..{}", init->transaction_count,
                                   max_worker_transactions / 2));
  const uint32_t n = init->transaction_count * 2;

  std::unique_ptr<core::memory_map> host_map = core::memory_map::import_pci(init->mmap_export);
  std::vector<uint8_t> rdma_blob;
  try {
    rdma_blob = host_map->export_rdma();
  } catch (const std::exception& e) {
    throw status_error(status::not_permitted,
                       fmt::format("Failed to re-export host mmap for rdma: {}", e.what()));
  }
  host_map_ = std::move(host_map);
  try {
    message reply = forward(request, message_type::init_storage_request,
                            storage::init_storage_request_payload{n, init->core_count, rdma_blob},
                            message_type::init_storage_response);
    if (reply.type == message_type::error_response) {
      teardown();
      return relay(reply, request);
    }
    // One by one in index order, each consumer started before the next worker is built: worker
    // i's consumer has the i-th smallest id (the pairing rule, storage/peer_consumers.hpp).
    comch::connection* conn = client_.channel().connection();
    if (conn == nullptr) throw session_lost(status::not_connected, "client connection lost");
    transactions_ = n;
    core_count_ = init->core_count;
    for (uint32_t i = 0; i < init->core_count; ++i) {
      zero_copy_worker& w = workers_.add(std::make_unique<zero_copy_worker>(
          options_.cpus[i], options_.poll_mode, device_, *conn, n,
          zero_copy_worker_limits{.command = options_.control_timeout,
                                  .drain = options_.control_timeout,
                                  .io = options_.control_timeout},
          options_.reconnect_timeout.count() != 0));
      const std::optional<message> refused = on_targets([&] {
        return connect_worker(
            targets_, request, i,
            {[&w](uint32_t, storage::rdma_role role) { return w.export_connection(role); },
             [&w](uint32_t, storage::rdma_role role, std::span<const uint8_t> blob) {
               w.connect(role, blob);
             }});
      });
      if (refused) {
        teardown();
        return *refused;
      }
    }
    ZC_LOG_INFO("init: {} workers with {} transactions each, host region of {} bytes",
                init->core_count, n, host_map_->size());
    return relay(reply, request);
  } catch (const session_lost&) {
    throw;
  } catch (...) {
    teardown();
    throw;
  }
}

message zero_copy_session::on_start(const message& request) {
  if (workers_.empty()) throw status_error(status::bad_state, "start before a successful init");
  message reply = forward(request, message_type::start_storage_request, storage::empty_payload{},
                          message_type::start_storage_response);
  if (reply.type == message_type::error_response) return relay(reply, request);
  // The client announces its consumers before its start request; our contexts must run. Both
  // bounded (the reference waited forever, §8.3).
  workers_.start(client_, options_.control_timeout);
  ZC_LOG_INFO("data path started on {} workers", workers_.size());
  return relay(reply, request);
}

message zero_copy_session::on_stop(const message& request) {
  // Ours drain first: the IOs in flight still need the target, and once the target stops its
  // connections, their failure is no error of ours.
  workers_.drain();
  std::optional<message> reply;
  std::exception_ptr failure;
  try {
    reply = forward(request, message_type::stop_storage_request, storage::empty_payload{},
                    message_type::stop_storage_response);
  } catch (...) {
    failure = std::current_exception();
  }
  stop_workers();
  workers_.close_comch();
  if (failure) std::rethrow_exception(failure);
  return relay(*reply, request);
}

message zero_copy_session::on_shutdown(const message& request) {
  // A shutdown in the middle of the data path ends it as a stop would first (drain, the target's
  // stop, fence, the host's IOs answered), so the target never goes away under IOs we relayed.
  if (workers_.started() && !workers_.stopped()) (void)on_stop(request);
  // The client's consumers go first (bounded: the reference looped forever, with a null
  // dereference, §8.3). A client that keeps them is noted, not obeyed.
  if (!client_.pump_until([&] { return client_.consumers().empty(); }, options_.control_timeout))
    ZC_LOG_WARN("{} client consumers still live at shutdown", client_.consumers().size());
  message reply = forward(request, message_type::shutdown_request, storage::empty_payload{},
                          message_type::shutdown_response);
  teardown();
  return relay(reply, request);
}

void zero_copy_session::check_health() {
  // Reconnecting is for a running data path: before start and after stop a lost target ends the
  // session as in the reference.
  const bool may_reconnect =
      options_.reconnect_timeout.count() != 0 && workers_.started() && !workers_.stopped();
  try {
    on_targets([this] { targets_.check_connections(); });
  } catch (const session_lost& e) {
    if (!may_reconnect || e.code() == status::shutdown) throw;
    reconnect(e.what());
    return;
  }
  // A data path that lost its target while the control connection lives on (a link down, a
  // target worker gone) leaves the host's IOs unanswered: the session ends, so they fail now.
  for (const auto& w : workers_) {
    if (!w->rdma_lost()) continue;
    const std::string why =
        fmt::format("worker on cpu {} lost its rdma connection to the target", w->cpu());
    if (!may_reconnect) throw session_lost(status::connection_reset, why);
    reconnect(why);
    return;
  }
}

uint64_t zero_copy_session::operations() {
  uint64_t n = 0;
  for (const auto& w : workers_) n += w->stats().operations;
  return n;
}

void zero_copy_session::reconnect(const std::string& why) {
  using clock = std::chrono::steady_clock;
  const auto started = clock::now();
  const uint64_t answered = operations();
  const bool served = !reconnect_deadline_ || answered != operations_at_reconnect_;
  const auto deadline = served ? started + options_.reconnect_timeout : *reconnect_deadline_;
  if (served) {
    ZC_LOG_WARN(
        "the target is lost ({}): holding the host's IOs and dialling it again for up to "
        "{} s (--reconnect-timeout)",
        why, options_.reconnect_timeout.count() / 1000);
  } else {
    ZC_LOG_WARN(
        "the target is lost again ({}) before it answered an IO since it came back: holding the "
        "host's IOs and dialling it again for what is left of the --reconnect-timeout of its "
        "first loss ({} ms)",
        why,
        std::max<int64_t>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - started).count()));
  }
  // Every worker holds its IOs from now on (those the lost target has, those the host sends).
  for (const auto& w : workers_) w->hold();
  std::chrono::milliseconds pause{200};
  for (;;) {
    // The fence, before every try: nothing of the lost target, or of a try that connected some
    // contexts and failed, may land in the host's memory once its IOs go to another.
    host_map_->withdraw_rdma_export();
    if (!workers_.fence([this] { return host_map_->rdma_export_drained(); }))
      end_process_unfenced("a lost target's transfers could not be fenced off the host");
    if (!served && clock::now() >= deadline)
      throw session_lost(status::time_out,
                         fmt::format("the target came back but answered no IO, and the "
                                     "--reconnect-timeout of {} s since it was first lost has "
                                     "passed ({})",
                                     options_.reconnect_timeout.count() / 1000, why));
    try {
      rejoin(deadline);
      reconnect_deadline_ = deadline;
      operations_at_reconnect_ = answered;
      ZC_LOG_INFO(
          "reconnected to the target after {} ms",
          std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - started).count());
      return;
    } catch (const session_lost&) {
      throw;
    } catch (const std::exception& e) {
      ZC_LOG_WARN("the target is not back yet: {}", e.what());
    }
    if (clock::now() + pause >= deadline)
      throw session_lost(status::time_out,
                         fmt::format("the target did not come back within --reconnect-timeout "
                                     "{} s ({})",
                                     options_.reconnect_timeout.count() / 1000, why));
    // The client is served meanwhile (its keep-alives answered; requests wait their turn).
    (void)client_.pump_until([] { return false; }, pause);
    if (core::stop_requested()) throw session_lost(status::shutdown, "stop requested");
    pause = std::min(pause * 2, std::chrono::milliseconds(5000));
  }
}

void zero_copy_session::rejoin(std::chrono::steady_clock::time_point deadline) {
  using clock = std::chrono::steady_clock;
  // Every wait on the target serves the client meanwhile (its keep-alives answered) and ends at
  // the reconnect deadline, whatever step it is in.
  struct idle_scope {
    target_set& targets;
    ~idle_scope() { targets.set_idle_hook(nullptr); }
  } scope{targets_};
  targets_.set_idle_hook([this, deadline] {
    (void)client_.pump(std::chrono::milliseconds(0));
    if (clock::now() >= deadline)
      throw session_lost(status::time_out,
                         fmt::format("the target did not come back within --reconnect-timeout "
                                     "{} s",
                                     options_.reconnect_timeout.count() / 1000));
  });
  targets_.redial(0, std::min(deadline, clock::now() + options_.control_timeout));
  const uint32_t cid = last_correlation_id_;
  message reply = targets_.request(0, {message_type::query_storage_request, cid, {}},
                                   message_type::query_storage_response);
  const auto* g = std::get_if<storage::query_storage_response_payload>(&reply.payload);
  if (g == nullptr) throw status_error(status::unexpected, "the target refused the query");
  if (geometry_ && *g != *geometry_)
    throw session_lost(
        status::bad_state,
        fmt::format("the target came back with other storage ({} bytes in blocks "
                    "of {}, was {} in blocks of {})",
                    g->total_size, g->block_size, geometry_->total_size, geometry_->block_size));
  const std::vector<uint8_t> rdma_blob = host_map_->export_rdma();
  reply = targets_.request(
      0,
      {message_type::init_storage_request, cid,
       storage::init_storage_request_payload{transactions_, core_count_, rdma_blob}},
      message_type::init_storage_response);
  if (reply.type == message_type::error_response)
    throw status_error(status::not_connected, "the target refused init");
  message request{message_type::init_storage_request, 0, cid, storage::empty_payload{}};
  uint32_t i = 0;
  for (const auto& w : workers_) {
    w->rearm();
    zero_copy_worker& worker = *w;
    const std::optional<message> refused = connect_worker(
        targets_, request, i++,
        {[&worker](uint32_t, storage::rdma_role role) { return worker.export_connection(role); },
         [&worker](uint32_t, storage::rdma_role role, std::span<const uint8_t> blob) {
           worker.connect(role, blob);
         }});
    if (refused) throw status_error(status::not_connected, "the target refused a connection");
  }
  reply = targets_.request(0, {message_type::start_storage_request, cid, {}},
                           message_type::start_storage_response);
  if (reply.type == message_type::error_response)
    throw status_error(status::not_connected, "the target refused start");
  const bool ready = client_.pump_until(
      [this] {
        for (const auto& w : workers_)
          if (!w->ready()) return false;
        return true;
      },
      std::min(options_.control_timeout,
               std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now())));
  if (!ready) throw status_error(status::time_out, "the new connections did not come up in time");
  uint32_t reissued = 0;
  for (const auto& w : workers_) reissued += w->resume();
  ZC_LOG_INFO("{} IOs held while the target was away relayed again", reissued);
}

void zero_copy_session::abort(const std::string& why) noexcept {
  failed_ = true;
  log_session_end(why);
  // Our side first: the host's IOs are answered or its consumers expire, whatever the target
  // does next.
  teardown();
  targets_.shutdown_all(last_correlation_id_);
}

// The fence (storage rule: an IO is answered failed only once nothing can still touch its
// memory): the host region's re-export is withdrawn, so the target's later requests are refused,
// every rdma context stops, and the transfers that already held the region finish; only then are
// the IOs the target never answered answered to the host.
void zero_copy_session::stop_workers() noexcept {
  if (host_map_) host_map_->withdraw_rdma_export();
  workers_.stop([this] { return !host_map_ || host_map_->rdma_export_drained(); });
}

void zero_copy_session::teardown() noexcept {
  // Withdrawn first: workers that never started (no IO relayed) are torn down without a fence.
  if (host_map_) host_map_->withdraw_rdma_export();
  if (workers_.started()) stop_workers();
  workers_.clear();
  host_map_.reset();
}

std::vector<storage::core_stats> zero_copy_session::stats() const {
  std::vector<storage::core_stats> out;
  for (const auto& s : workers_.stats())
    out.push_back({s.cpu, s.operations, std::nullopt, s.pe_hits, s.pe_misses});
  if (out.empty())
    for (uint32_t cpu : options_.cpus) out.push_back({cpu, 0, std::nullopt, 0, 0});
  return out;
}

}  // namespace zc::service
