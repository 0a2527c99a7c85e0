// The service side of one client (initiator) session over comch: the request loop of
// REFERENCE_SPEC §2.9 (one message per stage: query -> init -> start -> stop -> shutdown) and the
// client's comch link (requests that arrived while a handler waited, the client's consumers).
// A request_handler (zero-copy, gga) does the work of each stage; this file owns the protocol:
// a request of the wrong type gets UNEXPECTED "Unexpected X while expecting a Y" with the
// client's ids, and any exception a handler throws becomes an error_response (the reference let
// non-storage exceptions kill the process, §8.3). Thread rules: the control thread only.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "storage/comch_control_channel.hpp"
#include "storage/control_message.hpp"
#include "storage/keep_alive.hpp"
#include "storage/peer_consumers.hpp"

namespace zc::service {

// Thrown by a handler (or the loop) when the session cannot go on: the client is gone, a target
// is gone, a stop was requested. The loop tears the session down and fails it.
class session_lost : public status_error {
 public:
  using status_error::status_error;
};

// The client's comch connection as a handler sees it: messages the client sent early are kept
// for the loop, consumer events are applied as they come, keep-alives are answered at once.
// Requests a client may have sent ahead of their turn; more is a broken client.
inline constexpr size_t max_queued_requests = 16;

class client_link {
 public:
  // A non-zero keep_alive_timeout ends the session (session_lost) once the client sent nothing,
  // not even a keep-alive, for that long after it connected.
  explicit client_link(storage::comch_link& channel,
                       std::chrono::milliseconds keep_alive_timeout = std::chrono::milliseconds(0))
      : server_(channel), alive_(keep_alive_timeout) {}

  // The client's channel (a comch_session_channel in the services).
  storage::comch_link& channel() noexcept { return server_; }
  const storage::peer_consumers& consumers() const noexcept { return consumers_; }

  // The client connected: its keep-alive clock starts.
  void client_connected();
  // Polls the client channel for up to `timeout`: a message is kept for take_request(), consumer
  // events are applied. Returns success (something happened), time_out, or throws session_lost
  // (client connection lost, silent past the keep-alive timeout, Ctrl-C).
  status pump(std::chrono::milliseconds timeout);
  // Pumps until pred() holds or `timeout` passes; returns pred().
  template <typename Pred>
  bool pump_until(Pred pred, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!pred()) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return pred();
      pump(std::min(poll_slice,
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now)));
    }
    return true;
  }
  std::optional<storage::message> take_request();
  // Sends to the client; throws session_lost when the connection is gone.
  void send(const storage::message& msg);
  // Lets queued sends go out (bounded), e.g. the last response before the program ends.
  void flush(std::chrono::milliseconds timeout) noexcept;

  // How long one pump sleeps at most while a caller waits for a condition.
  static constexpr std::chrono::milliseconds poll_slice{10};

 private:
  void drain_events();
  // Queues a request that arrived before it was asked for; throws session_lost past the bound.
  void keep(storage::message&& m);

  storage::comch_link& server_;
  storage::peer_consumers consumers_;
  std::deque<storage::message> early_;
  storage::keep_alive alive_;
  bool connected_ = false;
};

// What a service does at each stage. Every on_* returns the response to the client (usually with
// the request's ids, make_response/relay) or throws: status_error becomes an error_response,
// session_lost ends the session.
class request_handler {
 public:
  virtual ~request_handler() = default;
  virtual storage::message on_query(const storage::message& request) = 0;
  virtual storage::message on_init(const storage::message& request) = 0;
  virtual storage::message on_start(const storage::message& request) = 0;
  virtual storage::message on_stop(const storage::message& request) = 0;
  virtual storage::message on_shutdown(const storage::message& request) = 0;
  // Between requests, at least every idle_check: throws session_lost when a target is gone.
  virtual void check_health() = 0;
  // The session failed (`why`): tell the targets (bounded), tear everything down. Never throws.
  virtual void abort(const std::string& why) noexcept = 0;
};

// "ending the session: why" for request_handler::abort: an error, or information when a stop was
// requested (SIGINT/SIGTERM ends sessions by design).
void log_session_end(const std::string& why) noexcept;

// How a session ended.
enum class session_outcome {
  completed,     // shutdown answered
  failed,        // client lost, target lost, or Ctrl-C mid-session
  never_started  // Ctrl-C before a client connected
};

// The start stage of a service (REFERENCE_SPEC §2.7 step 5, bounded where the reference waited
// forever): pumps the client until it has announced one consumer per worker and
// workers_ready() holds, then returns the consumer ids in pairing order (ids[i] is worker i's).
// Throws status_error: time_out (not ready within `timeout`, with what was missing), bad_state
// (more consumers than workers).
std::vector<uint32_t> await_client_consumers(client_link& client, size_t workers,
                                             const std::function<bool()>& workers_ready,
                                             std::chrono::milliseconds timeout);

// Waits for a client (until Ctrl-C), then serves its requests until shutdown or a failure.
session_outcome serve_client(client_link& client, request_handler& handler,
                             std::chrono::milliseconds idle_check = std::chrono::milliseconds(200));

}  // namespace zc::service
