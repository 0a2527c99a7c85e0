// The sessions of a service's life: one, then exit, as the reference does; or, with
// --keep-serving, session after session until SIGINT/SIGTERM, up to --max-sessions of them at
// once. Each session has its own thread, its own target connections (dialled before its client
// comes and kept alive while it waits), its own client channel and workers, so nothing of one
// session outlives it and one session's client or targets never stall another's.
// Thread rules: serve_sessions() on the control thread, which runs the comch server; the runner
// on the session threads.
//
//   auto targets = connect();        // before the channel is announced, as the reference
//   storage::comch_session_server server(representor, name, config.max_sessions);
//   return serve_sessions(config, server, std::move(targets), connect, run_one);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "service/client_session.hpp"
#include "service/service_config.hpp"
#include "service/target_set.hpp"
#include "storage/comch_session_server.hpp"

namespace zc::service {

struct session_result {
  session_outcome outcome = session_outcome::completed;
  uint64_t data_path_errors = 0;
  std::string stats;  // the session's stats block, printed whole once it ended
};

// Connects one session's targets; throws status_error when they cannot be reached.
using target_connector = std::function<std::unique_ptr<target_set>()>;
// Serves one client over `targets` (serve_client) and returns its stats block.
using session_runner = std::function<session_result(target_set& targets, client_link& client)>;

// Runs the sessions and returns the exit status. One session (no --keep-serving): 1 when it
// failed or its data path had errors, else 0. --keep-serving: sessions until a stop is requested,
// config.max_sessions at once (targets that cannot be reached for a session are dialled again
// with a growing pause); 1 when any session's data path had errors, else 0 — a client that failed
// or went away ends only its own session.
// `idle_stats` is printed when the program ends without having served a client (the reference
// prints its stats block at exit whatever happened).
int serve_sessions(const service_config& config, storage::comch_session_server& server,
                   std::unique_ptr<target_set> first_targets, const target_connector& connect,
                   const session_runner& run, const std::string& idle_stats);

}  // namespace zc::service
