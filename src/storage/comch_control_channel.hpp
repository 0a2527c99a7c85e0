// Control channels over comch (REFERENCE_SPEC §2.1: initiator = client on the host, service =
// server on the DPU). Each comch control message carries exactly one storage frame (§2.1 framing:
// u32 BE body length + body, FORMATS.md §6), checked with decode_frame: a malformed or oversized
// frame is reported by poll() and closes that connection.
//
//   comch_control_server server{representor, "storage_channel"};          // service
//   comch_control_client client{device, "storage_channel", deadline};    // initiator
//   client.send(query);  auto reply = wait_for(client, default_control_timeout);
//   while (auto e = server.take_consumer_event()) track(*e);              // data-path consumers
//
// Thread rules: those of control_channel: one thread owns a channel and calls everything on it.
// The channel owns the progress engine of its comch server or client and drives it inside
// poll() (and so inside wait_for()/wait_until_connected()); wait_fd() is readable when that
// engine has work (sockets, the comch mailbox, handshake and redial deadlines). Producers and
// consumers may be created on connection() with their own engine, on any thread (comch's rules),
// or on engine(): then poll() progresses them too, but wait_fd() does not wake for their
// doorbells. Either way they must be idle and destroyed before the channel. A channel may be
// handed to another thread between calls (tests build a client on one thread, use it on another).
// Consumer events of the peer are queued by poll(): drain take_consumer_event() after polling. A
// peer's consumer announced before a message it sent is queued by the time poll() returns that
// message (comch sends announcements first).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comch/client.hpp"
#include "comch/server.hpp"
#include "core/progress_engine.hpp"
#include "storage/control_channel.hpp"
#include "storage/unique_fd.hpp"

namespace zc::storage {

// Control sends a channel holds, in flight on comch or waiting for a comch send task. Past it
// send() returns full rather than growing without bound.
inline constexpr uint32_t default_max_queued_sends = 64;
// Consumer events kept for the owner; past it new ones are dropped (logged, counted).
inline constexpr size_t max_consumer_events = 4 * comch::max_peer_consumers;

struct comch_channel_options {
  // Largest frame body sent or accepted; also bounded by max_msg_size - frame_header_size.
  size_t max_body_size = default_max_body_size;
  // Largest comch message (one whole frame); DOCA's default on BlueField.
  uint32_t max_msg_size = comch::default_max_msg_size;
  // comch send tasks in flight: the reference's max_concurrent_control_messages.
  uint32_t send_tasks = comch::default_send_tasks;
  // Capacity of the ring of control sends (in flight + waiting), at least 1.
  uint32_t max_queued_sends = default_max_queued_sends;
};

// The peer started (created) or stopped (expired) a consumer on the connection: producers on
// connection() may send to `id` from `created` on until `expired`.
struct consumer_event {
  enum class kind : uint8_t { created, expired };
  kind what = kind::created;
  uint32_t id = 0;
  bool operator==(const consumer_event&) const = default;
};

// A control channel over one comch connection, as a session uses it: the messages, the peer's
// consumers, the connection its producers and consumers are created on.
class comch_link : public control_channel {
 public:
  // The comch connection while it is up, else nullptr: what producers and consumers are created
  // on.
  virtual comch::connection* connection() const noexcept = 0;
  // The next consumer event of the peer, oldest first; nullopt when none is queued.
  virtual std::optional<consumer_event> take_consumer_event() = 0;
  // Sends queued (in flight or waiting) right now.
  virtual size_t queued_sends() const noexcept = 0;
};

// The frame layer over one comch server or client; the two classes below only differ in how they
// get their connection.
class comch_control_channel : public comch_link {
 public:
  ~comch_control_channel() override;
  comch_control_channel(const comch_control_channel&) = delete;
  comch_control_channel& operator=(const comch_control_channel&) = delete;

  // As control_channel::send. Returns too_big for a frame over the connection's max_send_size()
  // too, full when max_queued_sends frames are queued, and connection_reset when the connection
  // the owner knows of is gone (poll() still delivers what it sent before and then reports it).
  [[nodiscard]] status send(const message& msg) override;
  [[nodiscard]] receive_result poll() override;
  // True from the poll() that reports a connection until the poll() that reports its loss (or
  // close()); for a client, from construction.
  bool is_connected() const noexcept override { return reported_ != 0; }
  // An epoll set holding the comch context's descriptor and a timer for its deadlines.
  int wait_fd() const noexcept override { return epoll_.get(); }
  void close() noexcept override;
  const std::string& last_error() const noexcept override { return last_error_; }

  // The comch connection the owner knows of (is_connected()) while it is still up.
  comch::connection* connection() const noexcept override;
  std::optional<consumer_event> take_consumer_event() override;
  uint64_t dropped_consumer_events() const noexcept { return dropped_events_; }

  // The engine this channel's comch context runs on (see the thread rules above).
  core::progress_engine& engine() noexcept { return engine_; }
  size_t max_body_size() const noexcept { return max_body_size_; }
  size_t queued_sends() const noexcept override { return count_; }
  uint32_t max_queued_sends() const noexcept { return static_cast<uint32_t>(ring_.size()); }

 protected:
  explicit comch_control_channel(const comch_channel_options& options);

  // The comch context the derived class built on engine(); its wait_fd joins wait_fd().
  void watch_context(core::context& ctx);
  virtual comch::send_task* allocate_send(comch::connection& to,
                                          std::span<const uint8_t> bytes) noexcept = 0;
  virtual status submit(comch::send_task& task) noexcept = 0;
  // Closes `c` from this side (no loss is reported for it).
  virtual void drop(comch::connection& c) noexcept = 0;
  // Runs after each engine progress() inside poll().
  virtual void after_progress() {}
  // Stops the context and progresses until it is idle (bounded).
  void stop_context() noexcept;
  // One round: progresses the engine, runs after_progress(), submits waiting sends, re-arms the
  // deadline timer. A failed submit closes the connection and is returned.
  std::optional<receive_result> progress_once();
  // Sleeps in poll(2) on wait_fd() and the stop descriptor until `deadline` at most.
  void sleep_until(std::chrono::steady_clock::time_point deadline) const;
  // The connected event queued for the current connection is consumed: it counts as reported.
  void report_current();

  // Event hooks for the derived classes' comch callbacks.
  void connected(comch::connection& c);
  // `c` is only compared, never used: it may be gone already.
  void lost(const comch::connection* c, status why, std::string text);
  void received(comch::connection& c, std::span<const uint8_t> bytes);
  void consumer(comch::connection& c, uint32_t id, bool created);
  void send_completed(comch::send_task& task) noexcept;

  comch::connection* current() const noexcept { return current_; }
  std::string peer_name(const comch::connection& c) const;

  comch_channel_options options_;
  const char* peer_role_ = "peer";  // "client" or "server", for texts

 private:
  // What poll() hands out, in arrival order.
  struct event {
    enum class kind : uint8_t { connected, message, lost } what = kind::message;
    uint64_t generation = 0;  // the connection it belongs to
    std::vector<uint8_t> bytes;
    status code = status::success;
    std::string text;
  };
  struct slot {
    std::vector<uint8_t> bytes;  // one encoded frame
    bool done = false;           // its send task completed
  };

  // Closes the connection of `generation` (if still up), drops its queued events and sends.
  receive_result fail(status code, std::string text, uint64_t generation);
  receive_result take_message(event& e);
  // Submits waiting sends while comch has send tasks; a failure closes the connection.
  status pump();
  // Drops the sends that are not in flight.
  void drop_waiting_sends() noexcept;
  void rearm_timer() noexcept;
  void drain_timer() noexcept;

  core::progress_engine engine_;
  unique_fd epoll_;
  unique_fd timer_;
  core::context* context_ = nullptr;
  size_t max_body_size_ = 0;
  comch::connection* current_ = nullptr;  // live connection, reported or not
  uint64_t generation_ = 0;               // of current_; one per connection
  uint64_t reported_ = 0;                 // the generation poll() reported connected; 0 = none
  std::string current_peer_, reported_peer_;
  bool dropping_ = false;  // drop() in progress: no loss event
  std::deque<event> events_;
  std::deque<consumer_event> consumer_events_;
  uint64_t dropped_events_ = 0;
  std::vector<slot> ring_;
  size_t head_ = 0;       // oldest slot
  size_t count_ = 0;      // [head_, head_ + count_) occupied
  size_t submitted_ = 0;  // the first `submitted_` occupied slots have a send task
  std::vector<uint8_t> scratch_;
  std::string last_error_;
};

// The service side: serves one initiator at a time on (host function, channel name). A second
// client that connects while one is served is disconnected at once (logged): it sees
// connection_reset (its constructor throws, or its first poll() reports it); the first client
// keeps working. After its client leaves, the server takes the next one.
class comch_control_server final : public comch_control_channel {
 public:
  // `representor` is the host function served (comch::server_config::representor; "" = auto).
  // Throws status_error: in_use when the name is taken, bad_config for bad sizes.
  comch_control_server(std::string_view representor, std::string_view name,
                       const comch_channel_options& options = {});
  ~comch_control_server() override;

  // Clients turned away so far (a second client, or another user refused by comch).
  uint64_t refused_clients() const noexcept { return refused_ + server_.refused_peers(); }

 private:
  comch::send_task* allocate_send(comch::connection& to,
                                  std::span<const uint8_t> bytes) noexcept override;
  status submit(comch::send_task& task) noexcept override;
  void drop(comch::connection& c) noexcept override;
  void after_progress() override;

  comch::server server_;
  std::vector<comch::connection*> intruders_;  // to disconnect after the progress round
  uint64_t refused_ = 0;
};

// The initiator side: connects on (device, channel name). No reconnection once the connection is
// lost.
class comch_control_client final : public comch_control_channel {
 public:
  // Dials again every few milliseconds (comch's redial interval) while no server has the name (it
  // may be starting), until `deadline`. Throws status_error: time_out at the deadline, shutdown
  // when a stop is requested, connection_reset when the server closed the connection at once (it
  // serves another client), not_permitted when comch refused us, not_connected for any other
  // failure.
  comch_control_client(std::string_view device, std::string_view name,
                       std::chrono::steady_clock::time_point deadline,
                       const comch_channel_options& options = {});
  ~comch_control_client() override;

 private:
  comch::send_task* allocate_send(comch::connection& to,
                                  std::span<const uint8_t> bytes) noexcept override;
  status submit(comch::send_task& task) noexcept override;
  void drop(comch::connection& c) noexcept override;
  void after_progress() override;
  // Takes the client's connection as this channel's (once: no reconnection).
  void adopt(comch::connection& c);

  comch::client client_;
  bool adopted_ = false;
  std::string server_;  // "server pid N", for texts once the connection is gone
};

}  // namespace zc::storage
