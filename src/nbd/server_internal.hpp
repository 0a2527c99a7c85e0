// The NBD server's own parts, shared by its files (server.cpp: listeners, the loop, connections
// and their output; handshake.cpp: options and TLS; transmission.cpp: requests, their ios and
// replies; io_share.cpp: shares of IO memory and the block locks of read-modify-write). Not for
// use outside src/nbd.
#pragma once

#include <sys/uio.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "nbd/protocol.hpp"
#include "nbd/server.hpp"

namespace zc::nbd {

namespace server_detail {

using clock_type = std::chrono::steady_clock;

// The input buffer holds the longest option we read whole, or a few request headers.
constexpr size_t input_capacity = max_option_length + option_header_size;
// iovecs gathered into one sendmsg / readv.
constexpr size_t max_iov = 64;
// The meta context id of base:allocation on every connection.
constexpr uint32_t base_allocation_id = 1;
constexpr int epoll_batch = 64;
// The most one discard or zeroing io covers, and the most bitmap one allocation map asks for.
constexpr uint32_t max_range_io = 1u << 30;
constexpr uint32_t max_map_bytes = 4096;
// Passes in which memory came back without enough for a waiting request before it reserves what
// comes back next (see within_share).
constexpr uint32_t max_misses = 16;
// proto.md: the minimum block size a server announces is a power of two of at most 64 KiB.
constexpr uint32_t max_minimum_block_size = 64 * 1024;

// epoll data: a connection's address (even), or (fd << 1) | 1 for the server's own fds.
constexpr uint64_t tag_fd(int fd) noexcept {
  return (uint64_t(uint32_t(fd)) << 1) | 1;
}

// How long a listener rests after accept ran out of descriptors or memory.
constexpr std::chrono::milliseconds accept_pause{100};
// Option replies a handshaking client may leave unread before its input is no longer read.
constexpr size_t max_handshake_replies = 16;
// TCP keep-alive on accepted TCP connections: a peer gone without a FIN (a dead host, a cut
// cable) is found after about idle + interval * count seconds.
constexpr int keep_alive_idle_s = 30;
constexpr int keep_alive_interval_s = 10;
constexpr int keep_alive_count = 3;
// How much of a client's string a log line shows.
constexpr size_t logged_string_limit = 64;

// A client's string for a log line: printable ASCII as it is, anything else as \xNN, and no more
// than logged_string_limit bytes of it (a hostile export name cannot forge or flood log lines).
inline std::string printable(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < logged_string_limit; ++i) {
    const auto ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x20 && ch < 0x7f && ch != '\\')
      out.push_back(static_cast<char>(ch));
    else
      out += fmt::format("\\x{:02x}", ch);
  }
  if (s.size() > logged_string_limit) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

// Calls f(address, length) for the pieces of an io's memory that hold its bytes [offset, offset +
// length), in order, until f returns false: the one walk over scattered IO memory.
template <typename F>
void for_each_piece(std::span<const iovec> segments, uint64_t offset, uint64_t length, F&& f) {
  for (const iovec& s : segments) {
    if (length == 0) return;
    if (offset >= s.iov_len) {
      offset -= s.iov_len;
      continue;
    }
    const size_t n = static_cast<size_t>(std::min<uint64_t>(s.iov_len - offset, length));
    if (!f(static_cast<uint8_t*>(s.iov_base) + offset, n)) return;
    length -= n;
    offset = 0;
  }
}

inline int to_ms(std::chrono::steady_clock::duration d) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

[[noreturn]] inline void throw_errno(std::string_view what) {
  throw status_error(status::operating_system, fmt::format("{}: {}", what, std::strerror(errno)));
}

inline server::block_range blocks_of(uint64_t offset, uint64_t length, uint32_t block) {
  return {offset / block, (offset + length - 1) / block};
}

}  // namespace server_detail

// One request from header to the last byte of its reply.
struct server::request {
  enum class stage : uint8_t {
    idle,       // no io held or wanted
    want_lock,  // an unaligned write waiting for an edge block (in lock_waiting_)
    want_io,    // waiting for IO memory (in its connection's wants)
    receiving,  // a WRITE's payload is being read into x
    submitted,  // x is with the backend
    replying,   // the reply is queued
  };
  bool used = false;
  stage at = stage::idle;
  request_header h;
  io* x = nullptr;
  io_kind next_kind = io_kind::read;  // what the io being waited for is for
  uint64_t next = 0;                  // WRITE_ZEROES: the next offset to zero
  uint64_t end = 0;
  bool fua_pending = false;  // a flush still to do before the reply
  uint64_t bytes = 0;        // counted in in_flight_bytes
  // A READ or WRITE not aligned to the storage's block: served through an io over the whole
  // blocks around it (a WRITE reads them first, then writes them back with its bytes in).
  bool rmw = false;
  bool rmw_reading = false;  // the blocks around a WRITE, or a WRITE_ZEROES' edge, being read
  // A discard or a zeroing by the storage: it takes its blocks as a read-modify-write does, so
  // that no write to them is in flight beside it (a hole punched under a write landing in the
  // target's mapping could cost the target a SIGBUS on a full file system).
  bool exclusive = false;
  bool locked = false;  // holds the blocks it writes, in locked_
  uint64_t cover_offset = 0;
  uint32_t cover_length = 0;
  uint32_t skip = 0;  // h.offset - cover_offset
  // A BLOCK_STATUS reply's body (its extents), sent from here: the request slot outlives its
  // reply, and the capacity is kept from one reply to the next (no allocation per request).
  std::string status_body;
};

struct server::reply {
  std::array<uint8_t, 32> header{};
  uint8_t header_size = 0;
  std::string extra;                      // handshake replies
  const std::string* borrowed = nullptr;  // sent after extra, owned by the request
  io* data = nullptr;
  uint32_t data_offset = 0;  // where the reply's data starts in the io (an unaligned READ)
  uint32_t data_length = 0;
  int64_t request = -1;  // freed once the reply is out
  bool close_after = false;
  bool start_tls = false;  // STARTTLS's ACK: the TLS handshake begins once it is out
  size_t total() const noexcept {
    return header_size + extra.size() + (borrowed != nullptr ? borrowed->size() : 0) + data_length;
  }
};

struct server::connection {
  enum class phase : uint8_t {
    client_flags,
    option_header,
    option_data,
    request_header,
    payload,  // a WRITE's payload into requests[receiving].x
    discard,  // bytes to drop: an oversized option or a refused WRITE's payload
    tls,      // STARTTLS answered: nothing is read but the TLS handshake until it is done
  };
  storage::unique_fd fd;
  // Once STARTTLS's ACK is out: every byte after it goes through this session.
  std::unique_ptr<storage::tls_session> tls;
  phase at = phase::client_flags;
  std::vector<uint8_t> in;
  size_t in_begin = 0;
  size_t in_end = 0;
  option_header opt;
  uint64_t discard_left = 0;
  bool discarding_option = false;
  uint32_t discard_request = 0;
  uint32_t discard_error = 0;
  bool no_zeroes = false;
  bool structured = false;
  bool meta_context = false;
  bool transmission = false;
  std::chrono::steady_clock::time_point handshake_deadline{};
  std::vector<request> requests;
  std::vector<uint32_t> free;
  uint32_t in_flight = 0;
  uint64_t in_flight_bytes = 0;
  // What its ios hold, from acquire to release: kept within its share (server::within_share).
  uint64_t held_bytes = 0;
  uint32_t held_slots = 0;
  // Its requests waiting for an io, oldest first: they go in order, and only behind each other.
  core::ring<uint32_t> wants;
  // Passes in which memory came back and the backend still had none for wants.front().
  uint32_t misses = 0;
  bool contending = false;  // holds an io or wants one: counted in server::contenders_
  uint32_t receiving = 0;
  uint64_t payload_done = 0;
  bool blocked = false;  // a WRITE waits for memory for its payload: nothing more is read
  core::ring<reply> out;
  size_t out_sent = 0;  // bytes of out.front() already sent
  bool disc = false;    // NBD_CMD_DISC or ABORT: close once every reply is out
  bool dead = false;    // fd closed; kept until its IO in flight has completed
  bool dirty = false;
  uint32_t interest = 0;
  // For request_timeout and idle_timeout (server::now_ when each happened).
  std::chrono::steady_clock::time_point last_input{};  // the last bytes received
  std::chrono::steady_clock::time_point
      output_waits{};  // the reply queue last moved, or began to wait
  std::chrono::steady_clock::time_point
      payload_began{};  // the WRITE payload (or refused one) began

  bool tls_up() const noexcept { return tls != nullptr && tls->handshake_done(); }
  // Decrypted bytes TLS holds: no readiness event will announce them.
  bool tls_pending() const noexcept { return tls_up() && tls->pending() != 0; }
  size_t buffered() const noexcept { return in_end - in_begin; }
  const uint8_t* data() const noexcept { return in.data() + in_begin; }
  void consume(size_t n) noexcept {
    in_begin += n;
    if (in_begin == in_end) in_begin = in_end = 0;
  }
};

}  // namespace zc::nbd
