#include "service/zero_copy_session.hpp"

#include <fmt/format.h>

#include "core/log.hpp"
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
  return relay(forward(request, message_type::query_storage_request, storage::empty_payload{},
                       message_type::query_storage_response),
               request);
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
    for (uint32_t i = 0; i < init->core_count; ++i) {
      zero_copy_worker& w = workers_.add(std::make_unique<zero_copy_worker>(
          options_.cpus[i], options_.poll_mode, device_, *conn, n,
          zero_copy_worker_limits{.command = options_.control_timeout,
                                  .drain = options_.control_timeout,
                                  .io = options_.control_timeout}));
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
  on_targets([this] { targets_.check_connections(); });
  // A data path that lost its target while the control connection lives on (a link down, a
  // target worker gone) leaves the host's IOs unanswered: the session ends, so they fail now.
  for (const auto& w : workers_)
    if (w->rdma_lost())
      throw session_lost(
          status::connection_reset,
          fmt::format("worker on cpu {} lost its rdma connection to the target", w->cpu()));
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
