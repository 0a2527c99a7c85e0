#include "service/worker_connections.hpp"

#include <fmt/format.h>

namespace zc::service {

using storage::message;
using storage::message_type;

std::optional<message> connect_worker(target_set& targets, const message& client_request,
                                      uint32_t worker, const worker_link& link) {
  for (auto role : {storage::rdma_role::io_data, storage::rdma_role::io_control}) {
    std::vector<message> answers;
    for (uint32_t k = 0; k < targets.size(); ++k)
      answers.push_back(targets.request(
          k,
          {message_type::create_rdma_connection_request, client_request.correlation_id,
           storage::rdma_connection_payload{worker, role, link.export_connection(k, role)}},
          message_type::create_rdma_connection_response));
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
