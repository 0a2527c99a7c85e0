#include "service/worker_connections.hpp"

#include <fmt/format.h>

namespace zc::service {

using storage::message;
using storage::message_type;

std::optional<message> connect_worker(target_set& targets, const message& client_request,
                                      uint32_t worker, const worker_link& link) {
  for (auto role : {storage::rdma_role::io_data, storage::rdma_role::io_control}) {
    // Every target is asked before any answer is waited for: one round trip, not one per target.
    const std::vector<message> answers = targets.request_each(
        [&](size_t k) -> target_request {
          return {message_type::create_rdma_connection_request, client_request.correlation_id,
                  storage::rdma_connection_payload{worker, role,
                                                   link.export_connection(uint32_t(k), role)}};
        },
        message_type::create_rdma_connection_response);
    if (answers.size() != targets.size())
      throw status_error(status::bad_state, "a storage target was given up while connecting");
    for (uint32_t k = 0; k < targets.size(); ++k) {
      if (answers[k].type == message_type::error_response) return relay(answers[k], client_request);
      const auto& p = std::get<storage::rdma_connection_payload>(answers[k].payload);
      if (p.context_idx != worker || p.role != role)
        throw status_error(
            status::unexpected,
            fmt::format("{} answered the connection of worker {} {} for worker {} {}",
                        targets.name(k), worker, storage::to_string(role), p.context_idx,
                        storage::to_string(p.role)));
      link.connect(k, role, p.connection_details);
    }
  }
  return std::nullopt;
}

}  // namespace zc::service
