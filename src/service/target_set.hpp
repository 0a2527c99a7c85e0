// target_set: a service's TCP control clients to its 1..n storage targets (REFERENCE_SPEC §2.1,
// §2.5). One message-id counter is shared by all targets, so mids are unique across them; every
// request carries the correlation id the caller gives (the client request being handled). A
// request waits for its response with a deadline (--control-timeout), matched by mid.
// Thread rules: one thread (the service's control thread) owns a target_set.
//
//   target_set targets({"10.0.0.2:1234"}, 5s);
//   auto reply = targets.request(0, {message_type::query_storage_request, client.correlation_id},
//                                message_type::query_storage_response);
//   if (reply.type == message_type::error_response) return relay(reply, client_request);
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "storage/control_message.hpp"
#include "storage/keep_alive.hpp"
#include "storage/tcp_control_channel.hpp"

namespace zc::service {

// What to send: the type, the client request's correlation id, the payload. The mid is the set's.
struct target_request {
  storage::message_type type = storage::message_type::query_storage_request;
  uint32_t correlation_id = 0;
  storage::message_payload payload;
};

// A target's control connection failed: the session cannot go on without it.
class target_lost : public status_error {
 public:
  target_lost(size_t target, status code, const std::string& what)
      : status_error(code, what), target_(target) {}
  size_t target() const noexcept { return target_; }

 private:
  size_t target_;
};

// Answers to other requests a wait drops before it counts the target as broken.
inline constexpr uint32_t max_stale_answers = 16;

class target_set {
 public:
  // Connects to every "a.b.c.d:port" in order, each retrying refused connects until
  // `control_timeout` from now; with `tls_keys` each connection is TLS (tcp_client_channel).
  // Throws status_error: invalid_value (bad address), time_out, shutdown (Ctrl-C),
  // not_connected, authentication (TLS handshake failed). A non-zero `keep_alive_timeout` turns
  // keep-alive on (see check_connections).
  target_set(const std::vector<std::string>& addresses, std::chrono::milliseconds control_timeout,
             std::chrono::milliseconds keep_alive_timeout = std::chrono::milliseconds(0),
             std::shared_ptr<const storage::psk_file> tls_keys = nullptr);
  ~target_set();
  target_set(const target_set&) = delete;
  target_set& operator=(const target_set&) = delete;

  size_t size() const noexcept { return channels_.size(); }
  std::chrono::milliseconds control_timeout() const noexcept { return timeout_; }
  // The mid the next message will carry.
  uint32_t next_message_id() const noexcept { return next_mid_; }
  bool connected(size_t target) const noexcept;
  // Gives a lost target up for the rest of the program (a gga session served degraded): its
  // channel is closed, and request_all, check_connections and shutdown_all pass it by.
  void forget(size_t target);
  bool forgotten(size_t target) const noexcept {
    return target < forgotten_.size() && forgotten_[target];
  }
  // "target 0 (127.0.0.1:1234)", for logs and error texts.
  std::string name(size_t target) const;

  // Sends to one target and waits (control_timeout, Ctrl-C aware) for the response with the same
  // mid. Returns a response of type `expected` (payload type checked) or the target's
  // error_response, for the caller to relay. Throws status_error: time_out (no response in time),
  // unexpected ("Unexpected X while expecting a Y", or a payload of the wrong type), shutdown
  // (Ctrl-C), and target_lost when the connection failed (sending or waiting).
  storage::message request(size_t target, const target_request& what,
                           storage::message_type expected);
  // The same request to every target not forgotten (one mid each), then their responses, in
  // target order.
  std::vector<storage::message> request_all(const target_request& what,
                                            storage::message_type expected);
  // Target k's own request what_for(k) to every target not forgotten, all sent before any
  // response is waited for (one deadline), then their responses, in target order.
  std::vector<storage::message> request_each(const std::function<target_request(size_t)>& what_for,
                                             storage::message_type expected);

  // Never blocks: reads what the targets sent unasked (logged and dropped) and throws target_lost
  // when a connection failed. For a service between client requests, at least every second.
  // With keep-alive on, it also sends each target its keep_alive_request when due and throws
  // target_lost for a target that sent nothing, not even a keep-alive answer, for longer than
  // the keep-alive timeout.
  void check_connections();

  // While set, every wait of the set (a response, a redial) runs `idle` at least every
  // idle_slice; what it throws ends the wait (a reconnect serves its client and enforces its own
  // deadline this way). Empty: no hook.
  void set_idle_hook(std::function<void()> idle) { idle_ = std::move(idle); }
  static constexpr std::chrono::milliseconds idle_slice{100};

  // Asks every target not forgotten for a keep-alive answer and waits for it (control_timeout
  // each): a target that took the connection but has no session for it (over its
  // --max-sessions) answers with an error. Throws target_lost with its reason, or time_out.
  void confirm();

  // Reconnect (--reconnect-timeout): closes target `target`'s connection if still open and dials
  // it again until `deadline` (refused connects retried), with the set's TLS keys; its keep-alive
  // clock starts afresh. Throws as the constructor does.
  void redial(size_t target, std::chrono::steady_clock::time_point deadline);

  // Best effort, for a session that failed: sends shutdown_request to every connected target and
  // waits up to control_timeout for each answer. Never throws.
  void shutdown_all(uint32_t correlation_id) noexcept;

  // Descriptors readable when a target channel has something to do (for a caller's poll set).
  std::vector<int> wait_fds() const;

 private:
  uint32_t send(size_t target, const target_request& what);
  storage::message wait_response(size_t target, uint32_t mid, storage::message_type expected,
                                 std::chrono::steady_clock::time_point deadline);
  [[noreturn]] void lost(size_t target, const std::string& why);
  // An error_response to a keep-alive: the target refused the session (lost).
  void check_keep_alive_answer(size_t target, const storage::message& answer);

  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds keep_alive_timeout_;
  std::shared_ptr<const storage::psk_file> tls_keys_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<storage::tcp_client_channel>> channels_;
  uint32_t next_mid_ = 0;  // REFERENCE_SPEC §2.5: from 0, shared by every target
  std::vector<bool> forgotten_;
  std::vector<storage::keep_alive> alive_;  // one per target
  std::function<void()> idle_;
};

// The target's response turned into the answer to the client: the target's type and payload,
// with the client request's mid and cid (REFERENCE_SPEC §2.7 step 2).
storage::message relay(const storage::message& target_response,
                       const storage::message& client_request);

}  // namespace zc::service
