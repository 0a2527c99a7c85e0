// The sessions of a service's life: one, then exit, as the reference does; or, with
// --keep-serving, one after another until SIGINT/SIGTERM. Each session gets fresh target
// connections, a fresh client link and fresh workers, so nothing of one session outlives it.
// Thread rules: the control thread only.
//
//   auto targets = connect();                    // before the channel is announced, as the
//   reference storage::comch_control_server server(...); return serve_sessions(config, server,
//   std::move(targets), connect, run_one);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "service/client_session.hpp"
#include "service/service_config.hpp"
#include "service/target_set.hpp"
#include "storage/comch_control_channel.hpp"

namespace zc::service {

struct session_result {
  session_outcome outcome = session_outcome::completed;
  uint64_t data_path_errors = 0;
};

// Connects one session's targets; throws status_error when they cannot be reached.
using target_connector = std::function<std::unique_ptr<target_set>()>;
// Serves one client over `targets` (serve_client) and prints that session's stats block.
using session_runner = std::function<session_result(target_set& targets, client_link& client)>;

// Runs the sessions and returns the exit status. One session (no --keep-serving): 1 when it
// failed or its data path had errors, else 0. --keep-serving: sessions until a stop is requested
// (targets that cannot be reached for the next session are dialled again with a growing pause);
// 1 when any session's data path had errors, else 0 — a client that failed or went away ends
// only its own session.
int serve_sessions(const service_config& config, storage::comch_control_server& server,
                   std::unique_ptr<target_set> first_targets, const target_connector& connect,
                   const session_runner& run);

}  // namespace zc::service
