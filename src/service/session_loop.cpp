#include "service/session_loop.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.hpp"
#include "core/thread.hpp"

namespace zc::service {
namespace {

using namespace std::chrono_literals;

constexpr auto first_redial_pause = 1s;
constexpr auto longest_redial_pause = 30s;
// How often a session thread waiting for its client checks its targets (keep-alives included).
constexpr auto idle_check = 200ms;

// Sleeps `pause` (false when a stop came first) and doubles it, up to the longest pause.
bool pause_before_redial(std::chrono::milliseconds& pause) {
  if (!core::sleep_unless_stopped(std::chrono::steady_clock::now() + pause)) return false;
  pause = std::min<std::chrono::milliseconds>(pause * 2, longest_redial_pause);
  return true;
}

// A session's targets, dialled until each one has a session for us (a keep-alive answered) or a
// stop is requested (nullptr). `pause` grows across failures; the caller resets it once a session
// ran.
std::unique_ptr<target_set> redial(const target_connector& connect,
                                   std::chrono::milliseconds& pause) {
  for (;;) {
    if (core::stop_requested()) return nullptr;
    try {
      std::unique_ptr<target_set> targets = connect();
      targets->confirm();
      return targets;
    } catch (const status_error& e) {
      if (e.code() == status::shutdown) return nullptr;
      ZC_LOG_ERROR("cannot reach the storage for the next session: {}; trying again in {} s",
                   e.what(), pause.count() / 1000);
    }
    if (!pause_before_redial(pause)) return nullptr;
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

// What the session threads share.
class session_slots {
 public:
  session_slots(const service_config& config, storage::comch_session_server& server,
                const target_connector& connect, const session_runner& run)
      : config_(config), server_(server), connect_(connect), run_(run) {}

  // One session thread: sessions until a stop (or, without --keep-serving, one).
  void serve(std::unique_ptr<target_set> targets) noexcept {
    try {
      serve_loop(std::move(targets));
    } catch (const std::exception& e) {
      // Its place is gone for the rest of the program: the exit status says so.
      ZC_LOG_ERROR("a session thread failed: {}", e.what());
      failed_ = true;
      thread_died_ = true;
    }
    ++finished_;
    server_.wake();
  }

  size_t finished() const noexcept { return finished_; }
  uint64_t errors() const noexcept { return errors_; }
  uint64_t sessions() const noexcept { return sessions_; }
  bool failed() const noexcept { return failed_; }
  bool thread_died() const noexcept { return thread_died_; }

 private:
  void serve_loop(std::unique_ptr<target_set> targets) {
    const auto keep_alive =
        std::chrono::duration_cast<std::chrono::milliseconds>(config_.keep_alive_timeout);
    std::chrono::milliseconds pause = first_redial_pause;
    for (;;) {
      if (!targets) {
        if (!config_.keep_serving) return;
        targets = redial(connect_, pause);
        if (!targets) return;
      }
      std::unique_ptr<storage::comch_session_channel> channel;
      try {
        channel = await_client(*targets);
      } catch (const std::exception& e) {
        ZC_LOG_ERROR("ending the connections to the storage while waiting for a client: {}",
                     e.what());
        targets->shutdown_all(0);
        targets.reset();
        if (!config_.keep_serving) {
          failed_ = true;
          return;
        }
        // Lost before a client came (a target that refused the session, or went away): the
        // next dial waits, and longer each time.
        if (!pause_before_redial(pause)) return;
        continue;
      }
      if (!channel) {
        // A stop before a client came: the targets are told (a one-session target ends too).
        targets->shutdown_all(0);
        return;
      }
      pause = first_redial_pause;
      const uint64_t number = ++sessions_;
      ZC_LOG_INFO("session {}: {} connected", number, channel->peer_name());
      client_link client(*channel, keep_alive);
      session_result result = run_(*targets, client);
      channel.reset();
      targets.reset();
      errors_ += result.data_path_errors;
      if (result.outcome == session_outcome::failed) failed_ = true;
      {
        std::lock_guard lock(print_mutex_);
        std::fputs(result.stats.c_str(), stdout);
        std::fflush(stdout);
      }
      if (!config_.keep_serving) return;
      ZC_LOG_INFO("session {} ended ({}{}){}", number, outcome_name(result.outcome),
                  result.data_path_errors != 0 ? ", data-path errors" : "",
                  core::stop_requested() ? "" : "; waiting for the next client");
    }
  }

  // The next client, while the idle targets are kept alive: nullptr after a stop request;
  // throws what check_connections() throws when a target is lost.
  std::unique_ptr<storage::comch_session_channel> await_client(target_set& targets) {
    auto next_check = std::chrono::steady_clock::now() + idle_check;
    for (;;) {
      if (auto channel = server_.next_client(idle_check)) return channel;
      if (core::stop_requested()) return nullptr;
      if (const auto now = std::chrono::steady_clock::now(); now >= next_check) {
        targets.check_connections();
        next_check = now + idle_check;
      }
    }
  }

  const service_config& config_;
  storage::comch_session_server& server_;
  const target_connector& connect_;
  const session_runner& run_;
  std::atomic<size_t> finished_{0};
  std::atomic<uint64_t> sessions_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<bool> failed_{false};
  std::atomic<bool> thread_died_{false};
  std::mutex print_mutex_;
};

}  // namespace

int serve_sessions(const service_config& config, storage::comch_session_server& server,
                   std::unique_ptr<target_set> first_targets, const target_connector& connect,
                   const session_runner& run, const std::string& idle_stats) {
  const size_t count = config.keep_serving ? std::max<uint32_t>(config.max_sessions, 1) : 1;
  session_slots slots(config, server, connect, run);
  std::vector<std::thread> threads;
  threads.reserve(count);
  try {
    for (size_t i = 0; i < count; ++i)
      threads.emplace_back(
          [&slots, targets = i == 0 ? std::move(first_targets) : nullptr]() mutable {
            slots.serve(std::move(targets));
          });
  } catch (const std::system_error& e) {
    // No thread for every session: the ones that run serve; a stop ends them.
    ZC_LOG_ERROR("cannot start a session thread: {}", e.what());
    if (threads.empty()) throw;
  }
  // The comch server runs here until every session thread has ended (they need it while ending).
  const size_t started = threads.size();
  server.run([&] { return slots.finished() == started; });
  for (auto& t : threads) t.join();
  if (slots.sessions() == 0) {
    std::fputs(idle_stats.c_str(), stdout);
    std::fflush(stdout);
  }
  if (slots.errors() != 0) ZC_LOG_ERROR("the data path had {} errors", slots.errors());
  if (slots.thread_died()) return 1;
  if (config.keep_serving) return slots.errors() != 0 ? 1 : 0;
  return slots.failed() || slots.errors() != 0 ? 1 : 0;
}

}  // namespace zc::service
