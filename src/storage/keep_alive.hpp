// keep_alive: the liveness of one control connection, as NVMe's keep-alive (KATO) works. The
// client side sends keep_alive_request every keep_alive_interval; the server answers at once.
// Each side counts the peer silent once nothing at all came from it for the timeout: a peer that
// stops answering (SIGSTOP, a dead host behind a live socket) is found in bounded time, in both
// directions. The timeout is judged only right after the connection was polled empty, so a
// message waiting in a socket never counts as silence. Thread rules: the connection's thread.
//
//   storage::keep_alive alive(10s);
//   if (alive.send_due(now)) { channel.send(storage::make_keep_alive()); alive.sent(now); }
//   if (got.msg) alive.heard(now);  else if (alive.expired(now)) end_session();
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>

#include "storage/control_message.hpp"

namespace zc::storage {

// How often a client sends keep_alive_request, whatever the timeouts: one small message a second
// is all an idle session costs, and peers with different timeouts agree without negotiation.
inline constexpr std::chrono::milliseconds keep_alive_interval{1000};
// --keep-alive-timeout's default, in seconds (NVMe's default KATO is 120 s; storage daemons that
// share a box want to know sooner).
inline constexpr uint32_t default_keep_alive_seconds = 10;
// A timeout must leave room for a few requests: at least this many seconds (0 turns it off).
inline constexpr uint32_t min_keep_alive_seconds = 2;
// The message id every keep_alive_request carries: outside the sequence of §2.5 (the reference's
// mids count up from 0), so a late keep-alive answer never passes for another request's answer.
inline constexpr uint32_t keep_alive_message_id = std::numeric_limits<uint32_t>::max();

inline message make_keep_alive() {
  return message{message_type::keep_alive_request, keep_alive_message_id, 0, empty_payload{}};
}

class keep_alive {
 public:
  using clock = std::chrono::steady_clock;

  // timeout zero: never expires (the peer may be a reference program that knows no keep-alive).
  explicit keep_alive(std::chrono::milliseconds timeout, clock::time_point now = clock::now())
      : timeout_(timeout), last_heard_(now), last_sent_(now) {}

  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  bool enabled() const noexcept { return timeout_.count() != 0; }

  // Anything from the peer counts: its answers and its requests alike.
  void heard(clock::time_point now) noexcept { last_heard_ = now; }
  // Restarts both clocks, e.g. when a new peer connected.
  void restart(clock::time_point now) noexcept { last_heard_ = last_sent_ = now; }

  bool send_due(clock::time_point now) const noexcept {
    return enabled() && now - last_sent_ >= keep_alive_interval;
  }
  void sent(clock::time_point now) noexcept { last_sent_ = now; }

  // Nothing came from the peer for longer than the timeout.
  bool expired(clock::time_point now) const noexcept {
    return enabled() && now - last_heard_ > timeout_;
  }

 private:
  std::chrono::milliseconds timeout_;
  clock::time_point last_heard_;
  clock::time_point last_sent_;
};

}  // namespace zc::storage
