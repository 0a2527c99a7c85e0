// The NBD server: listeners (a Unix socket, TCP with TCP_NODELAY, or sockets handed over by
// systemd), and one epoll loop on the calling thread for every connection. A connection goes
// through the fixed newstyle handshake, then transmission: many requests in flight, replies in
// whatever order the backend completes them, a reply queue sent whenever the socket is writable.
// A connection stops being read while it has max_in_flight requests (or max_in_flight_bytes of
// IO memory) unanswered, and starts again as its replies drain: a client that does not read its
// replies holds up no one else. Anything the protocol does not allow there (a bad magic, client
// flags it does not know) closes that connection only, and so does a handshake not finished
// within handshake_timeout.
//
//   zc::nbd::server s(backend, {.export_name = ""});
//   s.listen_unix("/tmp/zc.sock");
//   std::thread t([&] { s.run(); });  ...  s.stop();  t.join();
//
// Run to completion: instead of run() on a thread of its own, a server can be one more event
// source of the progress engine that drives its backend's IO (server_source.hpp), so that a
// request is read, submitted, completed and answered on one thread. Several such servers, one per
// IO worker, share the listeners of the first: it accepts and hands each connection to the next
// server of the group in turn, and max_connections counts the group's connections together.
//
// Thread rules: run() or step() on one thread; stop() and stopping() from any thread (stop() is
// async-signal-safe); the listen_* calls and join() before serving; adopt_connection() from any
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/ring.hpp"
#include "nbd/backend.hpp"
#include "nbd/protocol.hpp"
#include "storage/ipv4_endpoint.hpp"
#include "storage/tls_psk.hpp"
#include "storage/unique_fd.hpp"

namespace zc::nbd {

// TLS as nbdkit's --tls: off (NOTLS: STARTTLS is refused with ERR_POLICY), on (SELECTIVETLS: a
// client may upgrade), require (FORCEDTLS: every option but STARTTLS and ABORT is refused with
// ERR_TLS_REQD until the upgrade, and EXPORT_NAME closes the connection).
enum class tls_mode : uint8_t { off, on, require };
constexpr const char* to_string(tls_mode m) noexcept {
  return m == tls_mode::require ? "require" : m == tls_mode::on ? "on" : "off";
}

struct server_options {
  std::string export_name;
  tls_mode tls = tls_mode::off;
  // The pre-shared keys of TLS 1.3 (psktool/nbdkit format); needed unless tls is off.
  std::shared_ptr<const storage::psk_file> tls_keys;
  bool read_only = false;         // on top of the backend's own
  uint32_t max_connections = 64;  // more are accepted and closed at once
  uint32_t max_in_flight = 128;   // requests per connection not yet answered
  // Announced as NBD_INFO_BLOCK_SIZE's preferred size (at least the storage's block); the minimum
  // announced is 1: requests not aligned to the block are served by read-modify-write.
  uint32_t preferred_block_size = 4096;
  uint32_t max_block_size = 32u << 20;  // the largest READ or WRITE accepted
  // A connection still in the handshake after this long is closed: idle connections must not
  // hold every slot of max_connections.
  std::chrono::milliseconds handshake_timeout{10000};
  // A WRITE's payload must arrive whole within this long of its memory being ready, and each reply
  // must go out whole within this long of reaching the front of its queue: else the connection is
  // closed and what it held is freed, so no client keeps IO memory from the others (a 32 MiB
  // request needs about 1.1 MB/s at the default). 0: no bound.
  std::chrono::milliseconds request_timeout{30000};
  // A connection in transmission that has nothing in flight and sent nothing for this long is
  // closed. 0: never (nbdkit's default).
  std::chrono::milliseconds idle_timeout{0};
  // After stop(): how long the IO in flight and the replies still queued may take.
  std::chrono::milliseconds drain_timeout{10000};
};

// Counters, for logs and tests; read from the server's thread or after run() returned.
struct server_counters {
  uint64_t connections = 0;  // accepted and served
  uint64_t refused = 0;      // accepted and closed over max_connections
  uint64_t timed_out = 0;    // closed by handshake_timeout, request_timeout or idle_timeout
  uint64_t requests = 0;
  uint64_t io_errors = 0;
  uint64_t tls_sessions = 0;  // TLS handshakes completed
  // TLS handshakes begun and never completed: a wrong key, no TLS, the deadline, a close or a
  // stop in the middle.
  uint64_t tls_failures = 0;
};

class server {
 public:
  server(backend& storage, server_options options);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Throws status_error (operating_system) naming the socket when it cannot listen.
  void listen_unix(const std::string& path);
  // Returns the port (useful with port 0).
  uint16_t listen_tcp(const storage::ipv4_endpoint& where);
  // A listening socket made elsewhere (systemd socket activation).
  void adopt_listener(int fd);
  // The listeners LISTEN_PID/LISTEN_FDS hand over (fds 3...); 0 when the variables are not for
  // this process. Clears them from the environment, as sd_listen_fds does.
  static int listeners_from_systemd();

  // Serves until stop(): then accepts nothing more, reads no more requests, lets the IO in flight
  // finish and its replies go out (bounded by drain_timeout), closes everything and returns.
  void run();
  // One pass of run()'s loop: deadlines, the events ready (waiting for them at most `wait_ms`; 0
  // never blocks, -1 as long as the next deadline allows), completions, replies. Returns whether
  // the server still serves (false once a stop() has drained and everything is closed) and
  // whether the pass did anything.
  struct pass_result {
    bool serving = true;
    bool busy = false;
  };
  pass_result step(int wait_ms);
  // The part of a pass that completions need: a backend on this thread completed ios, their
  // replies go out now (no events are read). Returns whether there were any.
  bool serve_completions();
  // Completions or connections wait to be served: the next step() has work without any event.
  bool work_pending() const noexcept { return !dirty_.empty() || storage_.has_completions(); }
  // Readable when step() has events to take (its sockets, the stop eventfd, an fd backend's
  // completions).
  int event_fd() const noexcept { return epoll_.get(); }
  // When step() must run again at the latest, without any event (a deadline); max() if never.
  std::chrono::steady_clock::time_point next_wake() const noexcept { return next_wake_; }

  // Makes this server the acceptor of `group` (which may include it): each connection accepted
  // goes to the group's servers in turn, and max_connections bounds them all together. Before any
  // of them serves.
  void share_accepts_with(const std::vector<server*>& group);
  // A connection another server accepted; from any thread. Closed at once if this one stops.
  void adopt_connection(int fd) noexcept;

  void stop() noexcept;
  bool stopping() const noexcept { return stop_.load(std::memory_order_relaxed); }

  const server_counters& counters() const noexcept { return counters_; }
  // Connections the server still keeps: open ones, and closed ones until their IO has come back.
  // Same thread rule as counters().
  size_t tracked_connections() const noexcept { return connections_.size(); }

 public:
  // Blocks first..last of the storage.
  struct block_range {
    uint64_t first = 0;
    uint64_t last = 0;
    bool meets(const block_range& o) const noexcept { return first <= o.last && o.first <= last; }
  };

 private:
  struct connection;
  struct request;
  struct reply;

  void accept_from(int listener);
  void add_connection(storage::unique_fd fd);
  void take_adopted();
  void mark(connection& c);
  // Memory or edge blocks let go (a reply sent, a connection closed, a write answered): the
  // requests waiting for them go on (serve_wants and retry_lock_waiting mark their connections,
  // which may read again). Only connections whose state changed are marked: a pass costs nothing
  // for the others.
  void let_waiters_on();
  void begin_drain();
  // A pass that served connections may have armed deadlines (a handshake begun, a payload or a
  // reply waiting) that close_expired() has not seen: next_wake_ comes no later than the shortest
  // bound from now, when a pass computes the real next deadline.
  void expect_deadlines() noexcept;
  void take_completions_now();
  void serve_dirty();
  // After the drain: whatever is left is closed; ios still with the backend stay its own.
  void end_serving();
  void on_event(connection& c, uint32_t events);
  void on_readable(connection& c);
  // The socket's bytes, through TLS once the connection has upgraded: recv/readv and sendmsg's
  // results (-1 with errno EAGAIN when nothing moves now; 0 at the end of the stream).
  ssize_t receive(connection& c, const iovec* iov, size_t count);
  ssize_t transmit(connection& c, const iovec* iov, size_t count);
  // STARTTLS was answered: the TLS handshake runs until it is done or fails.
  void begin_tls(connection& c);
  void continue_tls(connection& c);
  bool process_input(connection& c);
  bool handle_option(connection& c);
  void handle_request(connection& c);
  uint32_t io_length(const request& r) const noexcept;
  static uint64_t io_bytes(const io& x) noexcept;
  // WRITE_ZEROES' whole blocks zeroed by the storage itself (no data written).
  bool zero_by_range(const request& r) const noexcept;
  void note_unknown(io_kind k) noexcept;
  void reply_allocated(connection& c, uint32_t index);
  void reply_map(connection& c, uint32_t index, const io& x);
  // A WRITE_ZEROES whose next piece is a partial block (read-modify-written).
  bool partial_zeroes(const request& r) const noexcept;
  // A WRITE's payload is read and dropped, then the request is answered `error`.
  void read_past_payload(connection& c, uint32_t index, uint32_t error);
  void start_io(connection& c, uint32_t index);
  void use_io(connection& c, uint32_t index, io& x);
  void submit_io(connection& c, uint32_t index);
  void retry_waiting();
  bool serve_wants(connection& c);
  // IO memory and backend slots, shared among the connections (see io_share.cpp).
  bool within_share(const connection& c, uint32_t length) const noexcept;
  io* take_io(connection& c, uint32_t length);
  // Whether the backend has `length` bytes and their slots free, counted together (not whether
  // they lie in one run).
  bool free_in_all(uint32_t length) const noexcept;
  void recount(connection& c) noexcept;
  // Read-modify-write of a request not aligned to the storage's block: its partial edge blocks
  // are held by one such request at a time (two of them in one block would lose an update).
  // A read-modify-write whose io is ready joins lock_waiting_; its read is submitted once it holds
  // the io's blocks: at once when they are free, no earlier waiter wants one and no write to them
  // is with the backend. A discard or a zeroing by the storage takes its blocks the same way.
  void take_blocks(connection& c, uint32_t index);
  // A write ready to go out (its payload in, a WRITE_ZEROES chunk, an unaligned write's
  // write-back): submitted, or held in lock_waiting_ while another request holds one of its blocks.
  void submit_write(connection& c, uint32_t index);
  // Whether a write to one of `blocks` is with the backend.
  bool write_in_flight_over(const block_range& blocks) const;
  bool held_by_another(const block_range& blocks, const request& me) const;
  void unlock(request& r);
  void retry_lock_waiting();
  // Every io goes back to the backend through here: memory that comes back may let a waiting
  // request go on, which run() checks once the connections are served.
  void release_io(io& x) noexcept;
  void on_io_done(connection& c, uint32_t index, io& x);
  void finish(connection& c, uint32_t index, uint32_t error);
  void finish_after_fua(connection& c, uint32_t index);
  void queue_reply(connection& c, reply r);
  void flush_output(connection& c);
  void update_interest(connection& c);
  void close_connection(connection& c);
  void reap(connection& c);
  // Closes the connections past a deadline: the handshake's, request_timeout's or
  // idle_timeout's. Returns how long until the next one may pass (for epoll's timeout; -1: none).
  int close_expired();
  bool reading_allowed(const connection& c) const;
  uint16_t transmission_flags(const connection& c) const noexcept;

  backend& storage_;
  server_options options_;
  bool read_only_;
  uint32_t announced_max_ = 0;  // NBD_INFO_BLOCK_SIZE's maximum
  std::vector<storage::unique_fd> listeners_;
  storage::unique_fd epoll_;
  storage::unique_fd wake_;  // eventfd: stop()
  std::atomic<bool> stop_{false};
  std::unordered_map<connection*, std::unique_ptr<connection>> connections_;
  // The open connections of this server's accept group (of this server alone without one):
  // counted up by the acceptor, down by the server that closes one.
  std::shared_ptr<std::atomic<uint32_t>> group_open_ = std::make_shared<std::atomic<uint32_t>>(0);
  std::vector<server*> group_;  // the acceptor's: who gets the next connection
  size_t next_in_group_ = 0;
  std::mutex adopted_mutex_;
  std::vector<int> adopted_;  // under adopted_mutex_: connections handed over, not yet taken
  std::vector<int> adopting_;
  // The loop's state between passes.
  std::vector<connection*> dirty_;
  std::vector<connection*> serving_now_;
  std::vector<block_extent> extents_;  // a BLOCK_STATUS reply's, reused
  bool draining_ = false;
  bool ended_ = false;
  std::chrono::steady_clock::time_point drain_deadline_{};
  std::chrono::steady_clock::time_point next_wake_ = std::chrono::steady_clock::time_point::max();
  // Connections whose requests wait for an io (connection::wants), served in turn.
  core::ring<connection*> wanting_;
  // The connection whose next request was passed over max_misses times: ios go to it first.
  connection* reserved_ = nullptr;
  uint32_t contenders_ = 0;  // connections that hold an io or want one
  uint64_t held_bytes_ = 0;  // by every connection's ios
  uint32_t held_slots_ = 0;
  // What the storage answered invalid_value once (it does not know the kind): the server falls
  // back for good (TRIM not done, zeroes written as data, every block allocated).
  bool no_discard_ = false;
  bool no_zero_range_ = false;
  bool no_map_ = false;
  // Writes waiting for blocks (read-modify-writes to take them, others for blocks one holds),
  // oldest first.
  std::deque<std::pair<connection*, uint32_t>> lock_waiting_;
  // The blocks read-modify-writes in progress hold, and which request holds each range.
  std::vector<std::pair<block_range, const request*>> locked_;
  std::vector<block_range> lock_scan_;  // retry_lock_waiting's, kept so it allocates once
  bool lock_released_ = false;          // since run() last let lock waiters on
  uint64_t ios_outstanding_ = 0;        // submitted, not yet completed
  bool memory_freed_ = false;           // an io went back since run() last retried the waiting
  std::vector<int> paused_listeners_;   // out of the loop until resume_accepting_at_ (EMFILE...)
  std::chrono::steady_clock::time_point resume_accepting_at_{};
  std::vector<io*> completed_;
  std::chrono::steady_clock::time_point now_{};  // read once per pass of run()
  server_counters counters_;
};

}  // namespace zc::nbd
