// The init stage's rdma connections of one service worker (REFERENCE_SPEC §2.7 step 3, §2.8): for
// each role, io_data then io_control, the worker's blob for every target goes out in a
// create_rdma_connection_request with the client's correlation id; every target answers with its
// own blob for the same worker and role, and the worker connects to each, in target order. Shared
// by the zero-copy service (one target) and gga (three).
// Thread rules: the control thread that owns the target_set.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "service/target_set.hpp"
#include "storage/control_message.hpp"

namespace zc::service {

struct worker_link {
  // The worker's connection blob for (target, role).
  std::function<std::vector<uint8_t>(uint32_t target, storage::rdma_role role)> export_connection;
  // Connects (target, role) to the target's blob.
  std::function<void(uint32_t target, storage::rdma_role role, std::span<const uint8_t> blob)>
      connect;
};

// Connects both roles of worker `worker` to every target of `targets`. Returns a target's
// error_response (with the client's ids, to relay) when one refused; nothing is connected past
// it. Throws status_error(unexpected) for an answer about another worker or role, and what
// target_set::request throws (target_lost included).
std::optional<storage::message> connect_worker(target_set& targets,
                                               const storage::message& client_request,
                                               uint32_t worker, const worker_link& link);

}  // namespace zc::service
