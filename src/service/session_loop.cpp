#include "service/session_loop.hpp"

#include <algorithm>
#include <chrono>

#include "core/log.hpp"
#include "core/thread.hpp"

namespace zc::service {
namespace {

using namespace std::chrono_literals;

constexpr auto first_redial_pause = 1s;
constexpr auto longest_redial_pause = 30s;

// The next session's targets, dialled until they answer or a stop is requested (nullptr).
std::unique_ptr<target_set> redial(const target_connector& connect) {
  std::chrono::milliseconds pause = first_redial_pause;
  for (;;) {
    if (core::stop_requested()) return nullptr;
    try {
      return connect();
    } catch (const status_error& e) {
      if (e.code() == status::shutdown) return nullptr;
      ZC_LOG_ERROR("cannot reach the storage for the next session: {}; trying again in {} s",
                   e.what(), pause.count() / 1000);
    }
    if (!core::sleep_unless_stopped(std::chrono::steady_clock::now() + pause)) return nullptr;
    pause = std::min<std::chrono::milliseconds>(pause * 2, longest_redial_pause);
  }
}

const char* outcome_name(session_outcome o) {
  switch (o) {
    case session_outcome::completed:
      return "shutdown";
    case session_outcome::failed:
      return "failed";
    case session_outcome::never_started:
      return "no client";
  }
  return "?";
}

}  // namespace

int serve_sessions(const service_config& config, storage::comch_control_server& server,
                   std::unique_ptr<target_set> first_targets, const target_connector& connect,
                   const session_runner& run) {
  const auto keep_alive =
      std::chrono::duration_cast<std::chrono::milliseconds>(config.keep_alive_timeout);
  std::unique_ptr<target_set> targets = std::move(first_targets);
  uint64_t errors = 0;
  uint64_t sessions = 0;
  session_result last;
  while (targets) {
    client_link client(server, keep_alive);
    last = run(*targets, client);
    targets.reset();
    errors += last.data_path_errors;
    if (last.outcome == session_outcome::never_started) break;
    ++sessions;
    if (!config.keep_serving) break;
    ZC_LOG_INFO("session {} ended ({}{}){}", sessions, outcome_name(last.outcome),
                last.data_path_errors != 0 ? ", data-path errors" : "",
                core::stop_requested() ? "" : "; waiting for the next client");
    targets = redial(connect);
  }
  if (errors != 0) ZC_LOG_ERROR("the data path had {} errors", errors);
  if (config.keep_serving) return errors != 0 ? 1 : 0;
  return last.outcome == session_outcome::failed || errors != 0 ? 1 : 0;
}

}  // namespace zc::service
