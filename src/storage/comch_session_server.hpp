// The service side of comch when several initiators are served at once (--max-sessions): one
// comch server, run by one thread (the server thread), hands each client it accepts to a session
// thread as a comch_session_channel, a control channel of its own. Clients beyond the limit are
// refused with a clear answer: their first request gets an error_response (DOCA_ERROR_IN_USE,
// "the service serves N sessions, its limit ..."), then the connection closes; never silence.
//
//   comch_session_server server(representor, "storage_channel", max_sessions);
//   // session threads:
//   while (auto channel = server.next_client(200ms)) serve(*channel);  // (nullptr: none yet)
//   // the server thread, until every session thread has ended:
//   server.run([&] { return sessions_done(); });
//
// Thread rules: run() on one thread; next_client() on any; each channel on one session thread at
// a time (control_channel's rules). Every channel must be gone before the server is destroyed.
// A channel's connection() may be handed to workers on other threads, as comch allows: the
// server keeps the connection object (not the connection) until the channel is destroyed.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "comch/server.hpp"
#include "core/progress_engine.hpp"
#include "storage/comch_control_channel.hpp"
#include "storage/unique_fd.hpp"

namespace zc::storage {

// Most sessions a service serves at once (--max-sessions).
inline constexpr uint32_t max_sessions_limit = 64;
// Messages a client may have sent that its session has not read yet; past it the client is
// disconnected (the session's own bound on requests sent ahead is smaller, max_queued_requests).
inline constexpr size_t max_unread_messages = 256;
// How long a refused client has to send the request its refusal answers.
inline constexpr std::chrono::milliseconds refusal_linger{2000};
// Refused clients kept at once for their answer; beyond it they are closed without one.
inline constexpr size_t max_refused_lingering = 16;
// How long an accepted client waits for a session thread to take it (every thread may be busy
// dialling its storage) before it is refused with that reason.
inline constexpr std::chrono::milliseconds admission_wait{2000};
// comch send tasks one client may hold at once: a client that does not read its socket keeps at
// most these, and the server has enough for every session and every lingering refusal, so no
// client can take another's.
inline constexpr uint32_t sends_per_client = 2;

namespace internal {
struct session_client;
}  // namespace internal

// One client, as its session thread sees it. Connected from the start; poll() reports the
// client's loss once, after the messages it sent before.
class comch_session_channel final : public comch_link {
 public:
  ~comch_session_channel() override;  // closes the client's connection if still up
  comch_session_channel(const comch_session_channel&) = delete;
  comch_session_channel& operator=(const comch_session_channel&) = delete;

  // As comch_control_channel::send (not_connected after close() or a reported loss,
  // connection_reset once the server saw the connection go, full past max_queued_sends).
  [[nodiscard]] status send(const message& msg) override;
  [[nodiscard]] receive_result poll() override;
  bool is_connected() const noexcept override { return !closed_; }
  // An eventfd, readable when the server queued something for poll().
  int wait_fd() const noexcept override;
  void close() noexcept override;
  const std::string& last_error() const noexcept override { return last_error_; }
  comch::connection* connection() const noexcept override;
  std::optional<consumer_event> take_consumer_event() override;
  size_t queued_sends() const noexcept override;

  pid_t peer_pid() const noexcept;
  // "client pid N", for logs.
  const std::string& peer_name() const noexcept;

 private:
  friend class comch_session_server;
  explicit comch_session_channel(std::shared_ptr<internal::session_client> client);
  // Ends the channel: the server closes the connection; events still queued are dropped.
  void end(status code, std::string text);

  std::shared_ptr<internal::session_client> client_;
  bool closed_ = false;
  std::string last_error_;
};

class comch_session_server {
 public:
  // `representor` is the host function served (comch::server_config::representor; "" = auto).
  // Throws status_error: in_use when the name is taken, bad_config for bad sizes or a
  // max_sessions outside 1..max_sessions_limit.
  comch_session_server(std::string_view representor, std::string_view name, uint32_t max_sessions,
                       const comch_channel_options& options = {});
  ~comch_session_server();
  comch_session_server(const comch_session_server&) = delete;
  comch_session_server& operator=(const comch_session_server&) = delete;

  // Runs the comch server on the calling thread until done() holds (checked every round; a
  // wake() makes a round). Stopping is the caller's: sessions still need the server while they
  // end, so a stop request does not end run() by itself.
  void run(const std::function<bool()>& done);
  // Any thread: makes run() check done() now.
  void wake() noexcept;

  // Any thread: the next accepted client no session has taken, waiting up to `timeout`;
  // nullptr when none came (or a stop was requested). Clients that left while waiting are
  // skipped.
  std::unique_ptr<comch_session_channel> next_client(std::chrono::milliseconds timeout);

  uint32_t max_sessions() const noexcept { return max_sessions_; }
  // Clients turned away so far (over the limit, or no session ready in time). Any thread.
  uint64_t refused_clients() const noexcept;

 private:
  struct refusal {
    std::chrono::steady_clock::time_point deadline;
    bool answered = false;  // the answer's send completed (or failed)
    std::string reason;     // the answer's text
  };
  struct send_context;

  void on_connect(comch::connection& c);
  void on_disconnect(comch::connection& c);
  void on_message(comch::connection& c, std::span<const uint8_t> bytes);
  void on_consumer(comch::connection& c, uint32_t id, bool created);
  void on_send_done(comch::send_task& task) noexcept;
  // Turns `c` away with `reason`: its first request is answered in_use with it, then it closes.
  void refuse(comch::connection& c, std::string reason);
  // Answers a refused client's first request and closes it once the answer went out.
  void answer_refused(comch::connection& c, std::span<const uint8_t> bytes);
  // Clients no session thread took within admission_wait are refused.
  void refuse_unclaimed();
  // After each progress round: the sessions' sends and closes, lingering refusals, channels gone.
  void serve_clients();
  // Sends ctx's bytes; on true the send owns ctx (freed in on_send_done).
  bool submit(comch::connection& c, send_context& ctx) noexcept;
  void sleep(std::chrono::milliseconds at_most) noexcept;
  void rearm_timer() noexcept;
  size_t active_sessions() const noexcept;

  comch_channel_options options_;
  uint32_t max_sessions_;
  size_t max_body_size_;
  core::progress_engine engine_;
  unique_fd wake_;   // eventfd: sessions sent, closed or went away
  unique_fd timer_;  // comch's deadlines
  unique_fd epoll_;  // the comch context, the timer, the wake eventfd
  comch::server server_;

  // Server thread only.
  std::unordered_map<const comch::connection*, std::shared_ptr<internal::session_client>> clients_;
  std::unordered_map<comch::connection*, refusal> refused_;
  std::vector<comch::connection*> to_close_;  // refused clients to disconnect after the round

  // Shared with next_client().
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<std::shared_ptr<internal::session_client>> waiting_;  // accepted, not yet taken
  uint64_t refused_count_ = 0;
};

}  // namespace zc::storage
