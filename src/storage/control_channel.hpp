// control_channel: one connection that carries control messages (REFERENCE_SPEC §2.1), whatever
// the transport (TCP now, comch later). Non-blocking; the owner polls it and sleeps on wait_fd().
// Thread rules: one thread owns a channel; none of it is thread-safe.
//
//   channel.send(request);
//   auto reply = zc::storage::wait_for(channel, control_timeout);
//   if (reply.failed()) throw status_error(reply.code, reply.text);
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "core/status.hpp"
#include "storage/control_message.hpp"

namespace zc::storage {

// What poll() and wait_for() hand back: at most one message, or a failure.
struct receive_result {
  std::optional<message> msg;
  // Not success: the connection failed and is closed now (poll), or nothing arrived in time
  // (wait_for: time_out; shutdown after Ctrl-C). `text` says what happened, for logs and replies.
  status code = status::success;
  std::string text;

  bool failed() const noexcept { return code != status::success; }
};

class control_channel {
 public:
  virtual ~control_channel() = default;

  // Queues `msg` and writes what the transport takes now; the rest goes out on later send() and
  // poll() calls. Never blocks. Returns not_connected without a peer, too_big for a body over the
  // channel's maximum, full when too much is already queued, or the transport's failure (the
  // connection is then closed). last_error() has the text.
  [[nodiscard]] virtual status send(const message& msg) = 0;

  // Never blocks. Moves the connection on (accepts a client, flushes queued bytes, reads) and
  // returns at most one message. A failure (code not success) means the connection is closed:
  // the peer closed it (connection_reset), sent a malformed frame (the decoder's status), or the
  // transport failed. The poll() call that establishes a connection returns no message, so
  // wait_until_connected() loses nothing.
  [[nodiscard]] virtual receive_result poll() = 0;

  virtual bool is_connected() const noexcept = 0;

  // Readable when poll() may have something to do; the same descriptor for the channel's whole
  // life, so it can sit in an epoll set. Messages already buffered do not make it readable: poll()
  // until nothing comes back before sleeping on it.
  virtual int wait_fd() const noexcept = 0;

  // Drops the connection; queued bytes are lost. A server goes back to waiting for a client.
  virtual void close() noexcept = 0;

  // The text of the last failure reported by send() or poll().
  virtual const std::string& last_error() const noexcept = 0;
};

// What a wait does once a stop was requested (zc::core::request_stop, Ctrl-C).
enum class on_stop_request {
  give_up,   // return shutdown at once: no wait outlives Ctrl-C
  carry_on,  // keep waiting (bounded): the orderly ending that Ctrl-C started (stop, shutdown)
};

// Polls until a message arrives, the connection fails, or `timeout` passes (time_out). Sleeps in
// poll(2) on wait_fd() in between, never spins. By default returns shutdown once a stop was
// requested.
[[nodiscard]] receive_result wait_for(control_channel& channel, std::chrono::milliseconds timeout,
                                      on_stop_request policy = on_stop_request::give_up);

// Polls until the channel is connected (a server has its client): success, time_out, shutdown.
[[nodiscard]] status wait_until_connected(control_channel& channel,
                                          std::chrono::milliseconds timeout);

}  // namespace zc::storage
