#include "nbd/server.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/bytes.hpp"
#include "core/log.hpp"
#include "nbd/protocol.hpp"

namespace zc::nbd {

namespace {

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
std::string printable(std::string_view s) {
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

int to_ms(std::chrono::steady_clock::duration d) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(d).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, INT_MAX));
}

[[noreturn]] void throw_errno(std::string_view what) {
  throw status_error(status::operating_system, fmt::format("{}: {}", what, std::strerror(errno)));
}

// FUA is accepted on every command once SEND_FUA is advertised (proto.md), ignored where it
// means nothing.
bool valid_flags(command c, uint16_t flags) noexcept {
  uint16_t allowed = command_flag::fua;
  switch (c) {
    case command::read:
      allowed |= command_flag::df;
      break;
    case command::write:
      break;
    case command::trim:
      break;
    case command::write_zeroes:
      allowed |= command_flag::no_hole | command_flag::fast_zero;
      break;
    case command::block_status:
      allowed |= command_flag::req_one;
      break;
    case command::disc:
    case command::flush:
    case command::cache:
      break;
  }
  return (flags & ~allowed) == 0;
}

}  // namespace

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
  bool locked = false;       // holds the blocks it writes, in locked_
  uint64_t cover_offset = 0;
  uint32_t cover_length = 0;
  uint32_t skip = 0;  // h.offset - cover_offset
};

struct server::reply {
  std::array<uint8_t, 32> header{};
  uint8_t header_size = 0;
  std::string extra;  // handshake replies
  io* data = nullptr;
  uint32_t data_offset = 0;  // where the reply's data starts in the io (an unaligned READ)
  uint32_t data_length = 0;
  int64_t request = -1;  // freed once the reply is out
  bool close_after = false;
  bool start_tls = false;  // STARTTLS's ACK: the TLS handshake begins once it is out
  size_t total() const noexcept { return header_size + extra.size() + data_length; }
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
  clock_type::time_point handshake_deadline{};
  std::vector<request> requests;
  std::vector<uint32_t> free;
  uint32_t in_flight = 0;
  uint64_t in_flight_bytes = 0;
  // What its ios hold, from acquire to release: kept within its share (server::within_share).
  uint64_t held_bytes = 0;
  uint32_t held_slots = 0;
  // Its requests waiting for an io, oldest first: they go in order, and only behind each other.
  std::deque<uint32_t> wants;
  // Passes in which memory came back and the backend still had none for wants.front().
  uint32_t misses = 0;
  bool contending = false;  // holds an io or wants one: counted in server::contenders_
  uint32_t receiving = 0;
  uint64_t payload_done = 0;
  bool blocked = false;  // a WRITE waits for memory for its payload: nothing more is read
  std::deque<reply> out;
  size_t out_sent = 0;  // bytes of out.front() already sent
  bool disc = false;    // NBD_CMD_DISC or ABORT: close once every reply is out
  bool dead = false;    // fd closed; kept until its IO in flight has completed
  bool dirty = false;
  uint32_t interest = 0;
  // For request_timeout and idle_timeout (server::now_ when each happened).
  clock_type::time_point last_input{};     // the last bytes received
  clock_type::time_point output_waits{};   // the reply queue last moved, or began to wait
  clock_type::time_point payload_began{};  // the WRITE payload (or refused one) began

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

server::server(backend& storage, server_options options)
    : storage_(storage), options_(std::move(options)) {
  if (options_.tls != tls_mode::off && (!options_.tls_keys || options_.tls_keys->entries.empty()))
    throw status_error(status::invalid_value, "nbd: TLS needs pre-shared keys");
  options_.max_block_size = std::min(options_.max_block_size, storage_.max_io());
  // The block sizes NBD_INFO_BLOCK_SIZE can announce (proto.md): a minimum that is a power of two
  // of at most 64 KiB, a preferred size between it and the maximum.
  const uint32_t minimum = storage_.block_size();
  if (minimum == 0 || (minimum & (minimum - 1)) != 0 || minimum > max_minimum_block_size)
    throw status_error(status::invalid_value,
                       fmt::format("nbd: the storage's block of {} bytes is not a power of two of "
                                   "at most {} bytes, as NBD clients require",
                                   minimum, max_minimum_block_size));
  if (storage_.size() % minimum != 0)
    throw status_error(status::invalid_value,
                       fmt::format("nbd: the storage's size ({} bytes) is not a whole number of "
                                   "blocks of {} bytes",
                                   storage_.size(), minimum));
  if (options_.max_block_size < 2 * minimum || options_.max_block_size % minimum != 0)
    throw status_error(status::invalid_value,
                       fmt::format("nbd: the largest request ({} bytes) is not two or more "
                                   "blocks of {} bytes",
                                   options_.max_block_size, minimum));
  read_only_ = options_.read_only || storage_.read_only();
  // Announced one block short of what an aligned request may be, so that an unaligned request of
  // the announced maximum still fits one io with the blocks around it.
  announced_max_ = options_.max_block_size > minimum ? options_.max_block_size - minimum
                                                     : options_.max_block_size;
  options_.preferred_block_size =
      std::min(std::max(options_.preferred_block_size, minimum), announced_max_);
  if (options_.max_in_flight == 0) options_.max_in_flight = 1;
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) throw_errno("epoll_create1");
  wake_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_) throw_errno("eventfd");
  for (int fd : {wake_.get(), storage_.completion_fd()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag_fd(fd);
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("epoll_ctl");
  }
}

server::~server() {
  for (auto& [p, c] : connections_) {
    if (!c->dead) close_connection(*c);
  }
  // ios still with the backend belong to it; their completions are never taken.
}

void server::adopt_listener(int fd) {
  storage::unique_fd owned(fd);
  // A socket systemd passed with Accept=yes is a connection, not a listener: refused now rather
  // than failing every accept later.
  int listening = 0;
  socklen_t len = sizeof listening;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening == 0)
    throw status_error(status::invalid_value,
                       fmt::format("inherited descriptor {} is not a listening socket", fd));
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) throw_errno("fcntl listener");
  (void)::fcntl(fd, F_SETFD, FD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = tag_fd(fd);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("epoll_ctl listener");
  listeners_.push_back(std::move(owned));
}

void server::listen_unix(const std::string& path) {
  sockaddr_un addr{};
  if (path.empty() || path.size() >= sizeof addr.sun_path)
    throw status_error(status::invalid_value, fmt::format("bad socket path '{}'", path));
  storage::unique_fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("socket");
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  // A socket file left by an earlier run is replaced; any other file is not.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw_errno(fmt::format("bind {}", path));
  if (::listen(fd.get(), SOMAXCONN) != 0) throw_errno(fmt::format("listen {}", path));
  adopt_listener(fd.release());
}

uint16_t server::listen_tcp(const storage::ipv4_endpoint& where) {
  storage::unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) throw_errno("socket");
  const int one = 1;
  (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(where.address);
  addr.sin_port = htons(where.port);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw_errno(fmt::format("bind {}", where.to_string()));
  if (::listen(fd.get(), SOMAXCONN) != 0) throw_errno(fmt::format("listen {}", where.to_string()));
  socklen_t len = sizeof addr;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw_errno("getsockname");
  adopt_listener(fd.release());
  return ntohs(addr.sin_port);
}

int server::listeners_from_systemd() {
  const char* pid = std::getenv("LISTEN_PID");
  const char* fds = std::getenv("LISTEN_FDS");
  if (pid == nullptr || fds == nullptr) return 0;
  char* end = nullptr;
  const long p = std::strtol(pid, &end, 10);
  if (*end != '\0' || p != static_cast<long>(::getpid())) return 0;
  const long n = std::strtol(fds, &end, 10);
  ::unsetenv("LISTEN_PID");
  ::unsetenv("LISTEN_FDS");
  ::unsetenv("LISTEN_FDNAMES");
  if (*end != '\0' || n <= 0 || n > 64) return 0;
  return static_cast<int>(n);
}

void server::stop() noexcept {
  stop_.store(true, std::memory_order_relaxed);
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

uint16_t server::transmission_flags(const connection& c) const noexcept {
  using namespace transmission_flag;
  uint16_t f = has_flags | send_flush | send_fua | send_trim | send_write_zeroes | send_cache |
               send_fast_zero | can_multi_conn;
  // DF only means something with structured replies, and proto.md wants it clear without them.
  if (c.structured) f |= send_df;
  if (read_only_) f |= read_only;
  return f;
}

// ---- the loop

void server::run() {
  std::array<epoll_event, epoll_batch> events{};
  std::vector<connection*> dirty;
  auto mark = [&dirty](connection& c) {
    if (!c.dirty) {
      c.dirty = true;
      dirty.push_back(&c);
    }
  };
  // Memory or edge blocks let go (a reply sent, a connection closed, a write answered): the
  // requests waiting for them go on, and the connections that stopped reading for them read again.
  auto let_waiters_on = [&] {
    memory_freed_ = false;
    const bool any_waiting = !wanting_.empty() || !lock_waiting_.empty();
    if (lock_released_) retry_lock_waiting();
    if (!wanting_.empty()) retry_waiting();
    if (any_waiting)
      for (auto& [p, c] : connections_) mark(*c);
  };
  bool draining = false;
  clock_type::time_point drain_deadline{};
  for (;;) {
    now_ = clock_type::now();
    const int next_deadline_ms = close_expired();  // first: nothing is dirty yet, so it may reap
    // A connection closed for a deadline may have let go of what others wait for: no readiness
    // event would tell.
    if (memory_freed_ || lock_released_) let_waiters_on();
    if (!paused_listeners_.empty() && clock_type::now() >= resume_accepting_at_) {
      for (int fd : paused_listeners_) {
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = tag_fd(fd);
        (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
      }
      paused_listeners_.clear();
    }
    if (stopping() && !draining) {
      draining = true;
      drain_deadline = clock_type::now() + options_.drain_timeout;
      for (auto& l : listeners_) (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, l.get(), nullptr);
      listeners_.clear();
      paused_listeners_.clear();
      // Requests still waiting for memory are answered at once; nothing new is read.
      reserved_ = nullptr;
      while (!wanting_.empty()) {
        connection* c = wanting_.front();
        wanting_.pop_front();
        while (!c->dead && !c->wants.empty()) {
          const uint32_t index = c->wants.front();
          c->wants.pop_front();
          if (c->blocked && c->at == connection::phase::payload && c->receiving == index) {
            c->blocked = false;
            close_connection(*c);  // mid-WRITE: its payload will never be read
          } else {
            c->requests[index].at = request::stage::idle;
            finish(*c, index, static_cast<uint32_t>(error_code::eshutdown));
          }
        }
        c->wants.clear();
        recount(*c);
        mark(*c);
      }
      // So are writes waiting for a block an unaligned one holds.
      while (!lock_waiting_.empty()) {
        auto [c, index] = lock_waiting_.front();
        lock_waiting_.pop_front();
        request& r = c->requests[index];
        if (c->blocked) {
          close_connection(*c);  // mid-WRITE: its payload will never be read
        } else {
          if (r.x != nullptr) release_io(*r.x);  // a write whose payload was in, never sent
          r.x = nullptr;
          r.at = request::stage::idle;
          finish(*c, index, static_cast<uint32_t>(error_code::eshutdown));
        }
        mark(*c);
      }
      // A handshaking client's next option is answered ERR_SHUTDOWN (proto.md) while the drain
      // lasts; one in the middle of its TLS handshake cannot be answered and is closed.
      for (auto& [p, c] : connections_) {
        if (!c->transmission && !c->dead && c->at == connection::phase::tls) {
          if (c->tls != nullptr) ++counters_.tls_failures;
          close_connection(*c);
        }
        mark(*c);
      }
    }
    if (draining) {
      bool busy = ios_outstanding_ != 0;
      for (auto& [p, c] : connections_)
        if (!c->dead && !c->out.empty()) busy = true;
      if (!busy || clock_type::now() >= drain_deadline) break;
    }
    int timeout_ms = draining ? 50 : next_deadline_ms;
    if (!paused_listeners_.empty())
      timeout_ms = timeout_ms < 0 ? static_cast<int>(accept_pause.count())
                                  : std::min(timeout_ms, static_cast<int>(accept_pause.count()));
    if (!dirty.empty()) timeout_ms = 0;  // work is waiting: only look for events
    const int n = ::epoll_wait(epoll_.get(), events.data(), epoll_batch, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("epoll_wait");
    }
    now_ = clock_type::now();
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if ((tag & 1) == 0) {
        auto* c = reinterpret_cast<connection*>(tag);
        if (!c->dead) on_event(*c, events[i].events);
        mark(*c);
        continue;
      }
      const int fd = static_cast<int>(tag >> 1);
      if (fd == wake_.get()) {
        uint64_t v;
        (void)!::read(fd, &v, sizeof v);
      } else if (fd == storage_.completion_fd()) {
        completed_.clear();
        storage_.take_completions(completed_);
        for (io* x : completed_) {
          --ios_outstanding_;
          auto* c = static_cast<connection*>(x->owner);
          on_io_done(*c, static_cast<uint32_t>(x->tag), *x);
          mark(*c);
        }
        if (lock_released_) retry_lock_waiting();
        retry_waiting();
        // Memory came back: connections blocked on it may read again.
        for (auto& [p, c] : connections_) mark(*c);
      } else {
        accept_from(fd);
        for (auto& [p, c] : connections_)
          if (!c->dirty) mark(*c);
      }
    }
    // Replies out, input processed again where reading is allowed once more, interest updated.
    while (!dirty.empty()) {
      std::vector<connection*> now;
      now.swap(dirty);
      for (connection* c : now) c->dirty = false;
      for (connection* c : now) {
        bool more = false;  // input left that the last round made progress on
        for (int round = 0; round < 4 && !c->dead; ++round) {
          flush_output(*c);
          more = false;
          if (!c->dead && c->buffered() == 0 && c->tls_pending() && reading_allowed(*c))
            on_readable(*c);
          if (c->dead || !reading_allowed(*c) || c->buffered() == 0) break;
          const size_t before = c->buffered();
          if (!process_input(*c)) break;
          if (c->buffered() == before) break;
          more = true;
        }
        if (!c->dead) flush_output(*c);
        if (!c->dead) update_interest(*c);
        // Its turn is over, not its input: served again after the others (a pipelined burst
        // already read from the socket gets no new readiness event).
        if (more && !c->dead && (c->buffered() != 0 || c->tls_pending()) && reading_allowed(*c))
          mark(*c);
        reap(*c);
      }
      if (dirty.empty() && (memory_freed_ || lock_released_)) let_waiters_on();
    }
  }
  // Whatever is left (a drain that ran out of time) is closed; ios still with the backend stay
  // its own.
  for (auto& [p, c] : connections_)
    if (!c->dead) close_connection(*c);
  std::erase_if(connections_, [](auto& e) { return e.second->in_flight == 0; });
}

void server::accept_from(int listener) {
  for (;;) {
    storage::unique_fd fd(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!fd) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // Out of descriptors or memory: the listener stays readable, so it is taken out of the
      // loop for a while instead of failing again on every pass.
      ZC_LOG_WARN("nbd: accept failed: {}; not accepting for {} ms", std::strerror(errno),
                  accept_pause.count());
      (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener, nullptr);
      paused_listeners_.push_back(listener);
      resume_accepting_at_ = clock_type::now() + accept_pause;
      return;
    }
    if (open_connections_ >= options_.max_connections) {
      ++counters_.refused;
      if (counters_.refused == 1)
        ZC_LOG_WARN("nbd: more than {} connections: closing the extra ones",
                    options_.max_connections);
      continue;  // closed by unique_fd
    }
    const int one = 1;
    // Both fail harmlessly on a Unix socket.
    (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) == 0) {
      (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_KEEPIDLE, &keep_alive_idle_s, sizeof(int));
      (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_KEEPINTVL, &keep_alive_interval_s, sizeof(int));
      (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_KEEPCNT, &keep_alive_count, sizeof(int));
    }
    auto owned = std::make_unique<connection>();
    connection& c = *owned;
    c.fd = std::move(fd);
    c.in.resize(input_capacity);
    c.requests.resize(options_.max_in_flight);
    c.free.reserve(options_.max_in_flight);
    for (uint32_t i = options_.max_in_flight; i-- > 0;) c.free.push_back(i);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = reinterpret_cast<uint64_t>(&c);
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.fd.get(), &ev) != 0) {
      ZC_LOG_WARN("nbd: epoll_ctl: {}", std::strerror(errno));
      continue;
    }
    c.interest = EPOLLIN;
    c.handshake_deadline = now_ + options_.handshake_timeout;
    c.last_input = now_;
    c.output_waits = now_;
    reply greeting;
    append_greeting(greeting.extra, handshake_flag::fixed_newstyle | handshake_flag::no_zeroes);
    c.out.push_back(std::move(greeting));
    ++open_connections_;
    ++counters_.connections;
    connections_.emplace(&c, std::move(owned));
  }
}

void server::on_event(connection& c, uint32_t events) {
  if (c.at == connection::phase::tls && c.tls != nullptr) {
    continue_tls(c);  // the handshake reads and writes for itself
    return;
  }
  if (events & EPOLLIN) on_readable(c);
  if (c.dead) return;
  if (events & EPOLLOUT) flush_output(c);
  if (c.dead) return;
  if ((events & (EPOLLERR | EPOLLHUP)) && !(events & EPOLLIN)) close_connection(c);
}

bool server::reading_allowed(const connection& c) const {
  if (c.dead || c.disc || c.blocked || c.at == connection::phase::tls) return false;
  if (stopping() && c.transmission) return false;  // handshakes go on, to hear ERR_SHUTDOWN
  // A client that sends options but reads no answers gets no more than a few queued.
  if (!c.transmission && c.out.size() >= max_handshake_replies) return false;
  if (c.at == connection::phase::request_header &&
      (c.in_flight >= options_.max_in_flight ||
       (c.in_flight != 0 && c.in_flight_bytes >= storage_.memory() / 4)))
    return false;
  return true;
}

void server::on_readable(connection& c) {
  if (!reading_allowed(c)) return;
  ssize_t n;
  if (c.at == connection::phase::payload && c.buffered() == 0) {
    // Straight into the IO memory.
    request& r = c.requests[c.receiving];
    std::array<iovec, max_iov> iov{};
    size_t count = 0;
    // Up to the payload's end: an unaligned write's io goes on past it.
    for_each_piece(r.x->segments, r.skip + c.payload_done, r.h.length - c.payload_done,
                   [&](uint8_t* at, size_t len) {
                     iov[count++] = {at, len};
                     return count < max_iov;
                   });
    n = receive(c, iov.data(), count);
    if (n > 0) {
      c.last_input = now_;
      c.payload_done += static_cast<uint64_t>(n);
      if (c.payload_done == r.h.length) {
        c.at = connection::phase::request_header;
        submit_write(c, c.receiving);
      }
      // As below: a record larger than the segment it filled leaves bytes with GnuTLS.
      if (c.tls_pending() && reading_allowed(c)) on_readable(c);
      return;
    }
  } else {
    if (c.in_begin != 0) {
      std::memmove(c.in.data(), c.data(), c.buffered());
      c.in_end -= c.in_begin;
      c.in_begin = 0;
    }
    if (c.in_end == c.in.size()) return;  // cannot happen: every phase that reads consumes
    const iovec into{c.in.data() + c.in_end, c.in.size() - c.in_end};
    n = receive(c, &into, 1);
    if (n > 0) {
      c.last_input = now_;
      c.in_end += static_cast<size_t>(n);
      (void)process_input(c);
      // Bytes GnuTLS decrypted and still holds get no readiness event: read on while the
      // protocol takes them (bounded by one record; each round consumes some).
      if (c.tls_pending() && reading_allowed(c)) on_readable(c);
      return;
    }
  }
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n == 0 && c.transmission && c.at == connection::phase::request_header && c.buffered() == 0) {
    // A half-close between requests (shutdown(SHUT_WR), as `nbdcopy` and friends may do): the
    // replies still owed go out, then the connection closes, as after NBD_CMD_DISC.
    c.disc = true;
    if (c.in_flight == 0 && c.out.empty()) close_connection(c);
    return;
  }
  close_connection(c);  // an error, or the end mid-message: what is in flight finishes unseen
}

// Consumes what is buffered as far as the protocol allows now. False when it closed c.
bool server::process_input(connection& c) {
  using phase = connection::phase;
  while (!c.dead) {
    const size_t avail = c.buffered();
    switch (c.at) {
      case phase::client_flags: {
        if (avail < client_flags_size) return true;
        const uint32_t flags = load_be32(c.data());
        c.consume(client_flags_size);
        // Fixed newstyle only; flags we do not know must close the connection (proto.md).
        if (!(flags & client_flag::fixed_newstyle) || (flags & ~client_flag::known)) {
          ZC_LOG_WARN("nbd: client flags {:#x} refused", flags);
          close_connection(c);
          return false;
        }
        c.no_zeroes = (flags & client_flag::no_zeroes) != 0;
        c.at = phase::option_header;
        break;
      }
      case phase::option_header: {
        // Answers are bounded before they are made: an option flood read in one go waits.
        if (avail < option_header_size || c.out.size() >= max_handshake_replies) return true;
        auto h = decode_option_header(
            std::span<const uint8_t, option_header_size>(c.data(), option_header_size));
        c.consume(option_header_size);
        if (!h) {
          close_connection(c);
          return false;
        }
        c.opt = *h;
        if (h->length > max_option_length &&
            h->option == static_cast<uint32_t>(option::export_name)) {
          // EXPORT_NAME has no error reply: a client would read one as the export size.
          ZC_LOG_WARN("nbd: NBD_OPT_EXPORT_NAME of {} bytes refused", h->length);
          close_connection(c);
          return false;
        }
        if (h->length > max_option_length) {
          c.discard_left = h->length;
          c.discarding_option = true;
          c.at = phase::discard;
        } else {
          c.at = phase::option_data;
        }
        break;
      }
      case phase::option_data:
        if (avail < c.opt.length) return true;
        if (!handle_option(c)) return false;
        break;
      case phase::request_header: {
        if (!reading_allowed(c) || avail < request_header_size) return true;
        handle_request(c);
        break;
      }
      case phase::payload: {
        if (avail == 0 || c.blocked) return true;
        request& r = c.requests[c.receiving];
        const size_t take =
            static_cast<size_t>(std::min<uint64_t>(avail, r.h.length - c.payload_done));
        const uint8_t* src = c.data();
        for_each_piece(r.x->segments, r.skip + c.payload_done, take, [&](uint8_t* at, size_t n) {
          std::memcpy(at, src, n);
          src += n;
          return true;
        });
        c.consume(take);
        c.payload_done += take;
        if (c.payload_done == r.h.length) {
          c.at = phase::request_header;
          submit_write(c, c.receiving);
        }
        break;
      }
      case phase::tls:
        return true;  // the handshake's bytes are TLS's, read by continue_tls
      case phase::discard: {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(avail, c.discard_left));
        c.consume(take);
        c.discard_left -= take;
        if (c.discard_left != 0) return true;
        if (c.discarding_option) {
          c.discarding_option = false;
          reply r;
          // FORCEDTLS: before the upgrade every option but STARTTLS and ABORT is TLS_REQD.
          if (options_.tls == tls_mode::require && !c.tls_up())
            append_option_reply(r.extra, c.opt.option, reply_type::err_tls_reqd,
                                std::string_view("TLS is required: send NBD_OPT_STARTTLS first"));
          else
            append_option_reply(r.extra, c.opt.option, reply_type::err_too_big,
                                std::string_view("option too long"));
          queue_reply(c, std::move(r));
          c.at = phase::option_header;
        } else {
          c.at = phase::request_header;
          finish(c, c.discard_request, c.discard_error);
        }
        break;
      }
    }
  }
  return false;
}

// The option in c.opt, its data buffered whole. False when it closed c.
bool server::handle_option(connection& c) {
  const std::span<const uint8_t> data(c.data(), c.opt.length);
  const uint32_t opt = c.opt.option;
  reply r;
  auto error = [&](uint32_t type, std::string_view text) {
    append_option_reply(r.extra, opt, type, text);
  };
  bool enter_transmission = false;
  bool start_tls = false;
  // FORCEDTLS: nothing but STARTTLS and ABORT before the upgrade.
  const bool tls_required = options_.tls == tls_mode::require && !c.tls_up() &&
                            opt != static_cast<uint32_t>(option::starttls) &&
                            opt != static_cast<uint32_t>(option::abort);
  if (stopping()) {
    // The server is going away: ABORT is acknowledged, anything else refused, and the
    // connection closes once the answer is out. EXPORT_NAME has no error reply.
    if (opt == static_cast<uint32_t>(option::export_name)) {
      close_connection(c);
      return false;
    }
    if (opt == static_cast<uint32_t>(option::abort))
      append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
    else
      error(reply_type::err_shutdown, "the server is shutting down");
    r.close_after = true;
    c.disc = true;
    c.consume(c.opt.length);
    queue_reply(c, std::move(r));
    c.at = connection::phase::option_header;
    return true;
  }
  if (tls_required && opt == static_cast<uint32_t>(option::export_name)) {
    // EXPORT_NAME has no error reply: the connection closes (proto.md).
    ZC_LOG_WARN("nbd: a client asked for the export without TLS, which is required: closed");
    close_connection(c);
    return false;
  }
  if (tls_required) {
    error(reply_type::err_tls_reqd, "TLS is required: send NBD_OPT_STARTTLS first");
  } else {
    switch (static_cast<option>(opt)) {
      case option::starttls:
        if (options_.tls == tls_mode::off) {
          error(reply_type::err_policy, "TLS is not enabled on this server");
        } else if (c.tls != nullptr) {
          error(reply_type::err_invalid, "TLS is already negotiated");
        } else if (!data.empty()) {
          error(reply_type::err_invalid, "NBD_OPT_STARTTLS takes no data");
        } else {
          append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
          r.start_tls = true;
          start_tls = true;
        }
        break;
      case option::export_name: {
        const std::string_view name(reinterpret_cast<const char*>(data.data()), data.size());
        if (name != options_.export_name) {
          // No error can be sent for EXPORT_NAME: the connection closes (proto.md).
          ZC_LOG_WARN("nbd: a client asked for unknown export '{}'", printable(name));
          c.consume(c.opt.length);
          close_connection(c);
          return false;
        }
        append_export_name_reply(r.extra, storage_.size(), transmission_flags(c), c.no_zeroes);
        enter_transmission = true;
        break;
      }
      case option::abort:
        append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
        r.close_after = true;
        c.disc = true;
        break;
      case option::list:
        if (!data.empty()) {
          error(reply_type::err_invalid, "NBD_OPT_LIST takes no data");
          break;
        }
        append_server_reply(r.extra, opt, options_.export_name);
        append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
        break;
      case option::info:
      case option::go: {
        auto go = decode_go(data);
        if (!go) {
          error(reply_type::err_invalid, "malformed request");
          break;
        }
        if (go->name != options_.export_name) {
          error(reply_type::err_unknown, "no such export");
          break;
        }
        append_info_export(r.extra, opt, storage_.size(), transmission_flags(c));
        // Always sent. The minimum is 1: an unaligned request is served by read-modify-write of
        // the blocks around it; the preferred size is the storage's block or more.
        append_info_block_size(r.extra, opt, 1, options_.preferred_block_size, announced_max_);
        append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
        enter_transmission = static_cast<option>(opt) == option::go;
        break;
      }
      case option::structured_reply:
        if (!data.empty()) {
          error(reply_type::err_invalid, "NBD_OPT_STRUCTURED_REPLY takes no data");
          break;
        }
        c.structured = true;
        append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
        break;
      case option::list_meta_context:
      case option::set_meta_context: {
        const bool set = static_cast<option>(opt) == option::set_meta_context;
        // A SET replaces the selection whatever its outcome: one that fails leaves none.
        if (set) c.meta_context = false;
        auto m = decode_meta_context(data);
        if (!m) {
          error(reply_type::err_invalid, "malformed request");
          break;
        }
        if (set && !c.structured) {
          error(reply_type::err_invalid, "structured replies first");
          break;
        }
        if (m->name != options_.export_name) {
          error(reply_type::err_unknown, "no such export");
          break;
        }
        bool matched = false;
        if (!set && m->query_count == 0) matched = true;  // list them all
        for (uint32_t i = 0; i < m->query_count && !matched; ++i) {
          const std::string_view q = m->query(i);
          if (q == base_allocation || (!set && q == "base:")) matched = true;
        }
        // LIST's replies carry id 0 (proto.md: reserved); SET's the id BLOCK_STATUS will use.
        if (matched)
          append_meta_context_reply(r.extra, opt, set ? base_allocation_id : 0, base_allocation);
        if (set) c.meta_context = matched;
        append_option_reply(r.extra, opt, reply_type::ack, std::string_view());
        break;
      }
      default:
        error(reply_type::err_unsup, "unsupported option");
        break;
    }
  }
  c.consume(c.opt.length);
  queue_reply(c, std::move(r));
  if (enter_transmission) {
    c.transmission = true;
    c.at = connection::phase::request_header;
  } else if (start_tls) {
    c.at = connection::phase::tls;
  } else {
    c.at = connection::phase::option_header;
  }
  return true;
}

void server::handle_request(connection& c) {
  auto decoded =
      decode_request(std::span<const uint8_t, request_header_size>(c.data(), request_header_size));
  c.consume(request_header_size);
  if (!decoded) {
    ZC_LOG_WARN("nbd: a request with a bad magic: closing the connection");
    close_connection(c);
    return;
  }
  const request_header h = *decoded;
  ++counters_.requests;
  const auto type = static_cast<command>(h.type);
  if (type == command::disc) {
    c.disc = true;  // what is in flight finishes, then the connection closes
    return;
  }
  // reading_allowed() guarantees a free request.
  const uint32_t index = c.free.back();
  c.free.pop_back();
  request& r = c.requests[index];
  r = request{};
  r.used = true;
  r.h = h;
  ++c.in_flight;
  const bool is_write = type == command::write;
  const uint64_t size = storage_.size();
  const uint32_t block = storage_.block_size();
  const bool in_range = h.length != 0 && h.offset <= size && h.length <= size - h.offset;
  const bool aligned = h.offset % block == 0 && h.length % block == 0;
  const bool known = h.type <= static_cast<uint16_t>(command::block_status);
  const bool moves_data = is_write || type == command::read;
  // Unaligned READ and WRITE go through the whole blocks around them, which must fit one io; an
  // unaligned WRITE_ZEROES zeroes its partial edge blocks by read-modify-write, one at a time, and
  // the whole blocks between as usual; TRIM (advisory), CACHE and BLOCK_STATUS need no alignment.
  const bool rmw = !aligned && in_range && moves_data;
  if (rmw) {
    r.rmw = true;
    r.cover_offset = h.offset - h.offset % block;
    const uint64_t end = h.offset + h.length;
    const uint64_t cover_end = end + (end % block == 0 ? 0 : block - end % block);
    r.cover_length =
        static_cast<uint32_t>(std::min<uint64_t>(cover_end - r.cover_offset, uint64_t(UINT32_MAX)));
    r.skip = static_cast<uint32_t>(h.offset - r.cover_offset);
  }
  uint32_t error = 0;
  if (!known || !valid_flags(type, h.flags)) {
    error = static_cast<uint32_t>(error_code::einval);
  } else if (read_only_ && (is_write || type == command::trim || type == command::write_zeroes)) {
    error = static_cast<uint32_t>(error_code::eperm);
  } else if ((is_write || type == command::write_zeroes) && h.length != 0 && !in_range) {
    error = static_cast<uint32_t>(error_code::enospc);  // past the end (proto.md: SHOULD)
  } else if (type != command::flush && !in_range) {
    error = static_cast<uint32_t>(error_code::einval);
  } else if (moves_data && h.length > options_.max_block_size) {
    error = static_cast<uint32_t>(error_code::einval);
  } else if (rmw && r.cover_length > storage_.max_io()) {
    error = static_cast<uint32_t>(error_code::einval);  // beyond the announced maximum
  } else if (type == command::block_status && !(c.structured && c.meta_context)) {
    error = static_cast<uint32_t>(error_code::einval);
  }
  if (error != 0) {
    if (is_write) {
      read_past_payload(c, index, error);  // on its way whatever the answer
      return;
    }
    finish(c, index, error);
    return;
  }
  r.fua_pending = (h.flags & command_flag::fua) != 0;
  switch (type) {
    case command::read:
    case command::write:
      r.next_kind = is_write ? io_kind::write : io_kind::read;
      r.bytes = h.length;
      c.in_flight_bytes += r.bytes;
      if (is_write) {
        c.receiving = index;
        c.payload_done = 0;
        c.at = connection::phase::payload;
        // Its payload waits in the socket until the blocks around it have been read.
        if (r.rmw) c.blocked = true;
      }
      start_io(c, index);
      return;
    case command::write_zeroes:
      // FAST_ZERO: only where the storage zeroes without writing data (proto.md: fail at once).
      if ((h.flags & command_flag::fast_zero) != 0 && !zero_by_range(r)) {
        finish(c, index, static_cast<uint32_t>(error_code::enotsup));
        return;
      }
      r.next_kind = io_kind::write;
      r.next = h.offset;
      r.end = h.offset + h.length;
      start_io(c, index);
      return;
    case command::flush:
      r.next_kind = io_kind::flush;
      r.fua_pending = false;
      start_io(c, index);
      return;
    case command::trim: {
      // The whole blocks inside the range are dropped where the storage can; the rest is advice
      // not taken (proto.md allows it).
      const uint64_t first = (h.offset + block - 1) / block * block;
      const uint64_t last = (h.offset + h.length) / block * block;
      if (!no_discard_ && first < last) {
        r.next_kind = io_kind::discard;
        r.next = first;
        r.end = last;
        start_io(c, index);
        return;
      }
      if (r.fua_pending) {
        r.fua_pending = false;
        r.next_kind = io_kind::flush;
        start_io(c, index);
        return;
      }
      finish(c, index, 0);
      return;
    }
    case command::cache:
      finish(c, index, 0);
      return;
    case command::block_status:
      if (no_map_) {
        reply_allocated(c, index);
        return;
      }
      r.next_kind = io_kind::allocation_map;
      start_io(c, index);
      return;
    case command::disc:
      return;
  }
}

void server::read_past_payload(connection& c, uint32_t index, uint32_t error) {
  c.discard_left = c.requests[index].h.length;
  c.discarding_option = false;
  c.discard_request = index;
  c.discard_error = error;
  c.at = connection::phase::discard;
  c.payload_began = now_;
}

bool server::partial_zeroes(const request& r) const noexcept {
  const uint32_t block = storage_.block_size();
  return r.next % block != 0 || r.end - r.next < block;
}

bool server::zero_by_range(const request& r) const noexcept {
  return !no_zero_range_ && (r.h.flags & command_flag::no_hole) == 0;
}

// The memory of the io that r needs next: none for a flush, a discard or a zeroing the storage
// does itself; a chunk of a WRITE_ZEROES written as data; an allocation map's bitmap.
uint32_t server::io_length(const request& r) const noexcept {
  if (r.next_kind == io_kind::flush || r.next_kind == io_kind::discard) return 0;
  const uint32_t block = storage_.block_size();
  if (r.next_kind == io_kind::allocation_map) {
    const uint64_t first = r.h.offset / block;
    const uint64_t blocks = (r.h.offset + r.h.length + block - 1) / block - first;
    return static_cast<uint32_t>(std::min<uint64_t>((blocks + 7) / 8, max_map_bytes));
  }
  if (r.rmw) return r.cover_length;
  if (static_cast<command>(r.h.type) == command::write_zeroes) {
    const uint64_t left = r.end - r.next;
    if (partial_zeroes(r)) return block;  // a partial edge block, read-modified-written
    if (zero_by_range(r)) return 0;
    return static_cast<uint32_t>(std::min<uint64_t>(left - left % block, storage_.max_io()));
  }
  return r.h.length;
}

// Bytes of storage an io covers.
uint64_t server::io_bytes(const io& x) noexcept {
  return x.kind == io_kind::discard || x.kind == io_kind::zero_range ? x.extent : x.length;
}

// Gets an io for what r does next, or queues r behind the connection's earlier waiters until
// memory comes back or the connection is back within its share.
void server::start_io(connection& c, uint32_t index) {
  request& r = c.requests[index];
  io* x = c.wants.empty() ? take_io(c, io_length(r)) : nullptr;
  if (x == nullptr) {
    r.at = request::stage::want_io;
    if (c.wants.empty()) wanting_.push_back(&c);
    c.wants.push_back(index);
    recount(c);
    if (c.at == connection::phase::payload && c.receiving == index) c.blocked = true;
    return;
  }
  use_io(c, index, *x);
}

// IO memory and queue entries are shared so that no client can starve the others, and no request
// waits behind another connection's:
// - a connection holds at most memory() / n bytes and slots() / n slots, n the connections that
//   hold or want an io (at least 2 where two may connect: a newcomer finds half free); one io
//   always, so each makes progress (the backend keeps one io within half a worker's memory);
// - each connection's waiters are served in order, connections in turn: one whose next request
//   does not fit now holds up no other connection;
// - a request passed over for max_misses passes in which memory came back (a large one among a
//   stream of small ones) reserves what comes back: no other connection gets an io until it has
//   one, which takes no longer than the ios out now take to finish.
bool server::within_share(const connection& c, uint32_t length) const noexcept {
  if (c.held_slots == 0) return true;
  const uint32_t n = std::max(contenders_, std::min<uint32_t>(2, options_.max_connections));
  const uint32_t block = storage_.block_size();
  const uint64_t bytes = (uint64_t(length) + block - 1) / block * block;
  return c.held_bytes + bytes <= storage_.memory() / n &&
         c.held_slots + storage_.slots_for(length) <= storage_.slots() / n;
}

io* server::take_io(connection& c, uint32_t length) {
  if ((reserved_ != nullptr && reserved_ != &c) || !within_share(c, length)) return nullptr;
  io* x = storage_.acquire(length);
  if (x == nullptr) return nullptr;
  x->owner = &c;
  c.held_bytes += x->length;
  c.held_slots += storage_.slots_for(x->length);
  recount(c);
  return x;
}

void server::release_io(io& x) noexcept {
  auto& c = *static_cast<connection*>(x.owner);
  c.held_bytes -= x.length;
  c.held_slots -= storage_.slots_for(x.length);
  recount(c);
  storage_.release(x);
  memory_freed_ = true;
}

void server::recount(connection& c) noexcept {
  const bool now = c.held_slots != 0 || !c.wants.empty();
  if (now == c.contending) return;
  c.contending = now;
  if (now)
    ++contenders_;
  else
    --contenders_;
}

void server::use_io(connection& c, uint32_t index, io& x) {
  request& r = c.requests[index];
  r.x = &x;
  x.tag = index;
  x.kind = r.next_kind;
  if (r.rmw && r.next_kind != io_kind::flush) {
    // The whole blocks around it are read first; a write's bytes go in once they are there.
    x.kind = io_kind::read;
    x.offset = r.cover_offset;
    r.rmw_reading = r.next_kind == io_kind::write;
    if (r.rmw_reading)
      read_held_blocks(c, index);
    else
      submit_io(c, index);  // a READ needs no block of its own
  } else if (static_cast<command>(r.h.type) == command::write_zeroes &&
             r.next_kind == io_kind::write && partial_zeroes(r)) {
    // A partial edge block: read, zeroed in part (on_io_done), written back.
    x.kind = io_kind::read;
    x.offset = r.next - r.next % storage_.block_size();
    r.rmw_reading = true;
    read_held_blocks(c, index);
  } else if (static_cast<command>(r.h.type) == command::write_zeroes &&
             r.next_kind == io_kind::write) {
    x.offset = r.next;
    if (x.length == 0) {  // the storage zeroes the range itself
      const uint64_t left = r.end - r.next;
      x.kind = io_kind::zero_range;
      x.extent = static_cast<uint32_t>(
          std::min<uint64_t>(left - left % storage_.block_size(), max_range_io));
    } else {
      x.kind = io_kind::write_zeroes;  // zeroed by the backend, not on this thread
    }
    submit_write(c, index);
  } else if (r.next_kind == io_kind::discard) {
    x.offset = r.next;
    x.extent = static_cast<uint32_t>(std::min<uint64_t>(r.end - r.next, max_range_io));
    submit_write(c, index);
  } else if (r.next_kind == io_kind::allocation_map) {
    x.offset = r.h.offset - r.h.offset % storage_.block_size();
    submit_io(c, index);
  } else if (r.next_kind == io_kind::write) {
    x.offset = r.h.offset;
    r.at = request::stage::receiving;  // on_readable/process_input fill it, then submit
    c.payload_began = now_;
  } else {
    x.offset = r.next_kind == io_kind::read ? r.h.offset : 0;
    submit_io(c, index);
  }
}

void server::submit_io(connection& c, uint32_t index) {
  request& r = c.requests[index];
  r.at = request::stage::submitted;
  ++ios_outstanding_;
  storage_.submit(*r.x);
}

namespace {
server::block_range blocks_of(uint64_t offset, uint64_t length, uint32_t block) {
  return {offset / block, (offset + length - 1) / block};
}
}  // namespace

// One rule for every write that shares a block with a read-modify-write, so that the bytes an
// acknowledged write put in a block are never brought back to what they were by one that read the
// block before and writes it back after: a read-modify-write (an unaligned WRITE, a WRITE_ZEROES'
// partial block) holds the blocks of its io (locked_) from before it reads them until its
// write-back has landed, and takes them only when no other write to them is with the backend; any
// other write to a held block waits until they are let go. All wait in one queue,
// lock_waiting_, served in order block by block. A request takes its io before its blocks and
// needs no other memory while it holds them, so a holder never waits for memory that writes
// waiting for its blocks hold.
bool server::write_in_flight_over(const block_range& blocks) const {
  const uint32_t block = storage_.block_size();
  for (const auto& [p, c] : connections_)
    for (const request& q : c->requests)
      if (q.used && q.at == request::stage::submitted && q.x != nullptr && writes(q.x->kind) &&
          blocks_of(q.x->offset, io_bytes(*q.x), block).meets(blocks))
        return true;
  return false;
}

bool server::held_by_another(const block_range& blocks, const request& me) const {
  for (const auto& [held, owner] : locked_)
    if (owner != &me && held.meets(blocks)) return true;
  return false;
}

void server::submit_write(connection& c, uint32_t index) {
  request& r = c.requests[index];
  // The common case, no read-modify-write anywhere; or one whose blocks are its own.
  if ((locked_.empty() && lock_waiting_.empty()) || r.locked) {
    submit_io(c, index);
    return;
  }
  r.at = request::stage::want_lock;
  lock_waiting_.emplace_back(&c, index);
  retry_lock_waiting();
}

void server::read_held_blocks(connection& c, uint32_t index) {
  c.requests[index].at = request::stage::want_lock;
  lock_waiting_.emplace_back(&c, index);
  retry_lock_waiting();  // at once when its blocks are free and no earlier waiter wants them
}

void server::unlock(request& r) {
  std::erase_if(locked_, [&r](const auto& l) { return l.second == &r; });
  r.locked = false;
  lock_released_ = true;
}

// Oldest first, block by block: a waiter never loses a block it waits for to a later one, and
// does not hold up waiters for other blocks. A read-modify-write takes its blocks and its read is
// submitted; a write that waited for a held block is submitted.
void server::retry_lock_waiting() {
  lock_released_ = false;
  const uint32_t block = storage_.block_size();
  std::vector<block_range> reserved;  // what the waiters passed over want
  auto taken = [&](const block_range& want) {
    for (const auto& r : reserved)
      if (r.meets(want)) return true;
    return false;
  };
  for (auto it = lock_waiting_.begin(); it != lock_waiting_.end();) {
    auto [c, index] = *it;
    request& r = c->requests[index];
    const block_range want = blocks_of(r.x->offset, io_bytes(*r.x), block);
    const bool go = !taken(want) && !held_by_another(want, r) &&
                    (!r.rmw_reading || !write_in_flight_over(want));
    if (!go) {
      reserved.push_back(want);
      ++it;
      continue;
    }
    it = lock_waiting_.erase(it);
    if (r.rmw_reading) {
      locked_.emplace_back(want, &r);
      r.locked = true;
    }
    submit_io(*c, index);
  }
}

// Gives each waiting connection, in turn, ios for its waiters in order while they fit (see
// within_share); the one reserved goes first.
void server::retry_waiting() {
  // Still short: the others wait (unless it lost its reservation, being over its share now).
  if (reserved_ != nullptr && !serve_wants(*reserved_) && reserved_ != nullptr) return;
  for (size_t n = wanting_.size(); n-- > 0 && !wanting_.empty();) {
    connection* c = wanting_.front();
    wanting_.pop_front();
    if (!serve_wants(*c)) {
      wanting_.push_back(c);
      if (reserved_ == nullptr && c->misses >= max_misses) reserved_ = c;
    }
  }
}

// Serves c's waiters in order; false when one is left waiting.
bool server::serve_wants(connection& c) {
  while (!c.wants.empty()) {
    const uint32_t index = c.wants.front();
    const uint32_t length = io_length(c.requests[index]);
    io* x = take_io(c, length);
    if (x == nullptr) {
      if (!within_share(c, length)) {
        // Over its share (more connections want ios now): it waits for its own ios to come
        // back, and reserves nothing meanwhile.
        c.misses = 0;
        if (reserved_ == &c) reserved_ = nullptr;
      } else if (reserved_ == nullptr || reserved_ == &c) {
        ++c.misses;  // short of the backend's memory: a pass that counts as a miss
      }
      return false;
    }
    c.wants.pop_front();
    c.misses = 0;
    if (reserved_ == &c) reserved_ = nullptr;
    recount(c);
    // An unaligned write's payload still waits for the read of the blocks around it.
    if (c.at == connection::phase::payload && c.receiving == index && !c.requests[index].rmw)
      c.blocked = false;
    use_io(c, index, *x);
  }
  return true;
}

void server::on_io_done(connection& c, uint32_t index, io& x) {
  request& r = c.requests[index];
  // A sparse kind the storage does not know (a reference target, the gga service): the server
  // falls back, for good.
  const bool unknown = (x.kind == io_kind::discard || x.kind == io_kind::zero_range ||
                        x.kind == io_kind::allocation_map) &&
                       x.result == status::invalid_value;
  const bool failed = !ok(x.result) && !unknown;
  // A write that landed may be what an unaligned write waits for before it takes a block.
  if (writes(x.kind) && !lock_waiting_.empty()) lock_released_ = true;
  if (failed) {
    ++counters_.io_errors;
    ZC_LOG_ERROR("nbd: {}{} of {} bytes at offset {:#x} failed: {}",
                 r.rmw_reading ? "reading the blocks around an unaligned " : "",
                 command_name(r.h.type), io_bytes(x), x.offset, status_name(x.result));
  }
  if (unknown) note_unknown(x.kind);
  if (c.dead) {
    release_io(x);
    r.x = nullptr;
    r.used = false;
    if (r.locked) unlock(r);
    c.free.push_back(index);
    --c.in_flight;
    c.in_flight_bytes -= r.bytes;
    return;
  }
  const auto type = static_cast<command>(r.h.type);
  if (r.rmw_reading) {
    r.rmw_reading = false;
    if (failed) {
      release_io(x);
      r.x = nullptr;
      r.at = request::stage::idle;  // nothing of it is with the backend any more
      if (type == command::write) {
        unlock(r);
        c.blocked = false;
        read_past_payload(c, index, static_cast<uint32_t>(error_code::eio));  // still in the socket
        return;
      }
      finish(c, index, static_cast<uint32_t>(error_code::eio));
      return;
    }
    x.kind = io_kind::write;
    if (type == command::write) {
      r.at = request::stage::receiving;  // the payload lands over the blocks just read
      c.blocked = false;
      c.payload_began = now_;
      return;
    }
    // WRITE_ZEROES: its part of the edge block just read zeroed, and the block written back.
    const uint64_t piece_end = std::min<uint64_t>(r.end, x.offset + storage_.block_size());
    for_each_piece(x.segments, r.next - x.offset, piece_end - r.next, [](uint8_t* at, size_t n) {
      std::memset(at, 0, n);
      return true;
    });
    submit_io(c, index);
    return;
  }
  if (r.locked && writes(x.kind)) unlock(r);  // its write-back landed
  if (x.kind == io_kind::allocation_map) {
    if (!failed && !unknown) reply_map(c, index, x);  // before its memory goes back
    release_io(x);
    r.x = nullptr;
    if (failed)
      finish(c, index, static_cast<uint32_t>(error_code::eio));
    else if (unknown)
      reply_allocated(c, index);
    return;
  }
  if (type == command::read && !failed) {
    reply rep;
    if (c.structured) {
      encode_offset_data_header(
          std::span<uint8_t, offset_data_header_size>(rep.header.data(), offset_data_header_size),
          r.h.cookie, r.h.offset, r.h.length);
      rep.header_size = offset_data_header_size;
    } else {
      encode_simple_reply(
          std::span<uint8_t, simple_reply_size>(rep.header.data(), simple_reply_size), r.h.cookie,
          error_code::ok);
      rep.header_size = simple_reply_size;
    }
    rep.data = &x;  // sent straight from the IO memory, released once out
    rep.data_offset = r.skip;
    rep.data_length = r.h.length;
    rep.request = index;
    r.at = request::stage::replying;
    queue_reply(c, std::move(rep));
    return;
  }
  release_io(x);
  r.x = nullptr;
  if (failed) {
    finish(c, index, static_cast<uint32_t>(error_code::eio));
    return;
  }
  if (unknown && x.kind == io_kind::zero_range) {
    if ((r.h.flags & command_flag::fast_zero) != 0) {
      // The client zeroes the range its own way (an edge block zeroed already does no harm).
      finish(c, index, static_cast<uint32_t>(error_code::enotsup));
      return;
    }
    start_io(c, index);  // the same range again, written as data
    return;
  }
  if (type == command::write_zeroes && writes(x.kind)) {
    r.next = partial_zeroes(r) ? std::min<uint64_t>(r.end, x.offset + storage_.block_size())
                               : r.next + io_bytes(x);
    if (r.next < r.end) {
      start_io(c, index);
      return;
    }
  }
  if (x.kind == io_kind::discard) {
    r.next = unknown ? r.end : r.next + x.extent;  // not known: advice not taken, as before
    if (r.next < r.end) {
      start_io(c, index);
      return;
    }
  }
  if (r.fua_pending) {
    r.fua_pending = false;
    r.next_kind = io_kind::flush;
    start_io(c, index);
    return;
  }
  finish(c, index, 0);
}

void server::note_unknown(io_kind k) noexcept {
  bool& known_not = k == io_kind::discard      ? no_discard_
                    : k == io_kind::zero_range ? no_zero_range_
                                               : no_map_;
  if (known_not) return;
  known_not = true;
  ZC_LOG_INFO("nbd: the storage does not know {}: {}",
              k == io_kind::discard      ? "discard"
              : k == io_kind::zero_range ? "write zeroes"
                                         : "allocation maps",
              k == io_kind::discard      ? "TRIM is taken as advice and not done"
              : k == io_kind::zero_range ? "zeroes are written as data"
                                         : "BLOCK_STATUS answers every block allocated");
}

// BLOCK_STATUS without a map: one extent, allocated data, over the whole request.
void server::reply_allocated(connection& c, uint32_t index) {
  request& r = c.requests[index];
  reply rep;
  const auto extent =
      static_cast<uint32_t>(std::min<uint64_t>(r.h.length, storage_.size() - r.h.offset));
  encode_block_status_chunk(
      std::span<uint8_t, block_status_chunk_size>(rep.header.data(), block_status_chunk_size),
      r.h.cookie, base_allocation_id, extent, 0);
  rep.header_size = block_status_chunk_size;
  rep.request = index;
  r.at = request::stage::replying;
  queue_reply(c, std::move(rep));
}

// BLOCK_STATUS from the storage's bitmap (x's memory, from block x.offset): extents from the
// request's offset, one per run of blocks alike, up to the request's end or the bitmap's (fewer
// bytes than asked, which proto.md allows); one only with REQ_ONE.
void server::reply_map(connection& c, uint32_t index, const io& x) {
  request& r = c.requests[index];
  const uint32_t block = storage_.block_size();
  const uint64_t covered =
      std::min<uint64_t>(x.offset + uint64_t(x.length) * 8 * block, storage_.size());
  const uint64_t end = std::min<uint64_t>(r.h.offset + r.h.length, covered);
  auto allocated = [&](uint64_t at) {
    const uint64_t bit = (at - x.offset) / block;
    bool set = false;
    for_each_piece(x.segments, bit / 8, 1, [&](uint8_t* p, size_t) {
      set = (*p >> (bit % 8)) & 1;
      return false;
    });
    return set;
  };
  std::vector<block_extent> extents;
  for (uint64_t at = r.h.offset; at < end;) {
    const bool state = allocated(at);
    uint64_t next = (at / block + 1) * block;
    while (next < end && allocated(next) == state) next += block;
    next = std::min(next, end);
    extents.push_back(
        {static_cast<uint32_t>(next - at), state ? 0 : block_state::hole | block_state::zero});
    at = next;
    if ((r.h.flags & command_flag::req_one) != 0) break;
  }
  reply rep;
  encode_block_status(std::span<uint8_t, structured_reply_header_size>(
                          rep.header.data(), structured_reply_header_size),
                      rep.extra, r.h.cookie, base_allocation_id, extents);
  rep.header_size = structured_reply_header_size;
  rep.request = index;
  r.at = request::stage::replying;
  queue_reply(c, std::move(rep));
}

// Queues the reply that ends request `index` (no data).
void server::finish(connection& c, uint32_t index, uint32_t error) {
  request& r = c.requests[index];
  r.at = request::stage::replying;
  if (r.locked) unlock(r);  // an unaligned write holds its blocks until answered
  if (c.dead) {
    r.used = false;
    c.free.push_back(index);
    --c.in_flight;
    c.in_flight_bytes -= r.bytes;
    return;
  }
  reply rep;
  rep.request = index;
  if (!c.structured) {
    encode_simple_reply(std::span<uint8_t, simple_reply_size>(rep.header.data(), simple_reply_size),
                        r.h.cookie, static_cast<error_code>(error));
    rep.header_size = simple_reply_size;
  } else if (error == 0) {
    encode_none_chunk(std::span<uint8_t, structured_reply_header_size>(
                          rep.header.data(), structured_reply_header_size),
                      r.h.cookie);
    rep.header_size = structured_reply_header_size;
  } else {
    encode_error_chunk(std::span<uint8_t, error_chunk_size>(rep.header.data(), error_chunk_size),
                       r.h.cookie, static_cast<error_code>(error));
    rep.header_size = error_chunk_size;
  }
  queue_reply(c, std::move(rep));
}

void server::queue_reply(connection& c, reply r) {
  if (c.out.empty()) c.output_waits = now_;
  c.out.push_back(std::move(r));
}

// Sends as much of the reply queue as the socket takes now.
void server::flush_output(connection& c) {
  while (!c.dead && !c.out.empty()) {
    std::array<iovec, max_iov> iov{};
    size_t count = 0;
    size_t skip = c.out_sent;
    for (reply& r : c.out) {
      auto add = [&](void* base, size_t len) {
        if (len == 0 || count == max_iov) return;
        if (skip >= len) {
          skip -= len;
          return;
        }
        iov[count++] = {static_cast<uint8_t*>(base) + skip, len - skip};
        skip = 0;
      };
      add(r.header.data(), r.header_size);
      add(r.extra.data(), r.extra.size());
      if (r.data != nullptr)
        for_each_piece(r.data->segments, r.data_offset, r.data_length,
                       [&](uint8_t* at, size_t len) {
                         add(at, len);
                         return count < max_iov;
                       });
      if (count == max_iov) break;
    }
    const ssize_t n = transmit(c, iov.data(), count);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      close_connection(c);
      return;
    }
    size_t sent = c.out_sent + static_cast<size_t>(n);
    while (!c.out.empty() && sent >= c.out.front().total()) {
      reply& r = c.out.front();
      sent -= r.total();
      // Each reply must go out whole within request_timeout of reaching the front: a client
      // draining at a trickle does not keep its IO memory for ever.
      c.output_waits = now_;
      if (r.data != nullptr) release_io(*r.data);
      if (r.request >= 0) {
        request& q = c.requests[static_cast<size_t>(r.request)];
        q.used = false;
        q.x = nullptr;
        q.at = request::stage::idle;
        c.free.push_back(static_cast<uint32_t>(r.request));
        --c.in_flight;
        c.in_flight_bytes -= q.bytes;
      }
      const bool close_after = r.close_after;
      const bool start_tls = r.start_tls;
      c.out.pop_front();
      if (close_after) {
        c.out_sent = 0;
        close_connection(c);
        return;
      }
      if (start_tls) {
        c.out_sent = 0;
        begin_tls(c);
        return;
      }
    }
    c.out_sent = sent;
  }
  if (!c.dead && c.disc && c.in_flight == 0 && c.out.empty()) close_connection(c);
}

void server::update_interest(connection& c) {
  uint32_t want = 0;
  if (c.at == connection::phase::tls && c.tls != nullptr) {
    want = c.tls->wants_write() ? EPOLLOUT : EPOLLIN;  // whichever way the handshake waits
  } else {
    if (reading_allowed(c)) want |= EPOLLIN;
    if (!c.out.empty()) want |= EPOLLOUT;
  }
  if (want == c.interest) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = reinterpret_cast<uint64_t>(&c);
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev) == 0) c.interest = want;
}

// Closes the socket at once; the connection stays until its IO with the backend has come back.
void server::close_connection(connection& c) {
  if (c.dead) return;
  c.dead = true;
  (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  if (c.tls != nullptr) {
    if (c.tls->handshake_done()) c.tls->bye();
    c.tls.reset();
  }
  c.fd.reset();
  --open_connections_;
  std::erase(wanting_, &c);
  c.wants.clear();
  c.misses = 0;
  if (reserved_ == &c) reserved_ = nullptr;
  recount(c);
  std::erase_if(lock_waiting_, [&c](const auto& w) { return w.first == &c; });
  c.blocked = false;
  // Replies not sent and memory not submitted go back now.
  for (reply& r : c.out) {
    if (r.data != nullptr) release_io(*r.data);
    if (r.request >= 0) {
      request& q = c.requests[static_cast<size_t>(r.request)];
      q.used = false;
      q.x = nullptr;
      c.free.push_back(static_cast<uint32_t>(r.request));
      --c.in_flight;
      c.in_flight_bytes -= q.bytes;
    }
  }
  c.out.clear();
  for (uint32_t i = 0; i < c.requests.size(); ++i) {
    request& q = c.requests[i];
    if (!q.used || q.at == request::stage::submitted) continue;
    if (q.locked) unlock(q);
    if (q.x != nullptr) release_io(*q.x);
    q.x = nullptr;
    q.used = false;
    c.free.push_back(i);
    --c.in_flight;
    c.in_flight_bytes -= q.bytes;
  }
}

int server::close_expired() {
  using std::chrono::milliseconds;
  std::vector<std::pair<connection*, std::string>> expired;
  auto next = clock_type::time_point::max();
  auto due = [&](clock_type::time_point deadline) {
    if (deadline > now_) next = std::min(next, deadline);
    return deadline <= now_;
  };
  const auto request_bound = options_.request_timeout;
  const auto idle_bound = options_.idle_timeout;
  for (auto& [p, owned] : connections_) {
    connection& c = *owned;
    if (c.dead) continue;
    if (!c.transmission) {
      if (due(c.handshake_deadline))
        expired.emplace_back(&c, fmt::format("did not finish its handshake{} in {} ms",
                                             c.at == connection::phase::tls ? " (TLS)" : "",
                                             options_.handshake_timeout.count()));
      continue;
    }
    // Every armed deadline counts for the next wake-up; the first reason found closes it.
    const bool in_payload = (c.at == connection::phase::payload && !c.blocked) ||
                            (c.at == connection::phase::discard && !c.discarding_option);
    const bool bounded = request_bound != milliseconds(0);
    const bool payload_late = bounded && in_payload && due(c.payload_began + request_bound);
    const bool replies_late = bounded && !c.out.empty() && due(c.output_waits + request_bound);
    const bool idle = idle_bound != milliseconds(0) && c.in_flight == 0 && c.out.empty() &&
                      !c.disc && due(c.last_input + idle_bound);
    if (payload_late)
      expired.emplace_back(
          &c, fmt::format("did not send a WRITE's payload within {} ms", request_bound.count()));
    else if (replies_late)
      expired.emplace_back(&c,
                           fmt::format("left its replies unread for {} ms", request_bound.count()));
    else if (idle)
      expired.emplace_back(&c, fmt::format("was idle for {} ms", idle_bound.count()));
  }
  for (auto& [c, why] : expired) {
    if (c->at == connection::phase::tls && c->tls != nullptr) ++counters_.tls_failures;
    ++counters_.timed_out;
    ZC_LOG_WARN("nbd: a client {}: closed", why);
    close_connection(*c);
    reap(*c);
  }
  return next == clock_type::time_point::max() ? -1 : std::max(1, to_ms(next - now_));
}

ssize_t server::receive(connection& c, const iovec* iov, size_t count) {
  if (!c.tls_up()) return ::readv(c.fd.get(), iov, static_cast<int>(count));
  // One record at a time into the first buffer: a short read is a read all the same.
  const auto got = c.tls->recv(static_cast<uint8_t*>(iov[0].iov_base), iov[0].iov_len);
  using state = storage::tls_session::io_result::state;
  switch (got.what) {
    case state::ok:
      return static_cast<ssize_t>(got.bytes);
    case state::again:
      errno = EAGAIN;
      return -1;
    case state::closed:
      return 0;
    case state::failed:
      break;
  }
  ZC_LOG_DEBUG("nbd: TLS receive failed: {}", c.tls->error());
  errno = ECONNRESET;
  return -1;
}

ssize_t server::transmit(connection& c, const iovec* iov, size_t count) {
  if (!c.tls_up()) {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = count;
    return ::sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  // Buffer by buffer: after `again` the next call starts with the same bytes, as GnuTLS needs
  // (flush_output offers what is still unsent, from the same queue).
  size_t total = 0;
  using state = storage::tls_session::io_result::state;
  for (size_t i = 0; i < count; ++i) {
    const auto* base = static_cast<const uint8_t*>(iov[i].iov_base);
    size_t done = 0;
    while (done < iov[i].iov_len) {
      const auto put = c.tls->send(base + done, iov[i].iov_len - done);
      if (put.what == state::ok) {
        done += put.bytes;
        continue;
      }
      if (total + done != 0) return static_cast<ssize_t>(total + done);
      if (put.what == state::again) {
        errno = EAGAIN;
      } else {
        ZC_LOG_DEBUG("nbd: TLS send failed: {}", c.tls->error());
        errno = EPIPE;
      }
      return -1;
    }
    total += done;
  }
  return static_cast<ssize_t>(total);
}

void server::begin_tls(connection& c) {
  // The client must wait for the ACK before it starts TLS: plain bytes after STARTTLS are not
  // the protocol (and would otherwise be taken as TLS's).
  if (c.buffered() != 0) {
    ZC_LOG_WARN("nbd: a client sent data after NBD_OPT_STARTTLS before its answer: closed");
    ++counters_.tls_failures;
    close_connection(c);
    return;
  }
  // What was negotiated in plain text does not hold inside TLS: a man in the middle may have
  // added it (nbdkit's CVE-2021-3716). The client negotiates again over TLS.
  c.structured = false;
  c.meta_context = false;
  try {
    c.tls = std::make_unique<storage::tls_session>(storage::tls_session::role::server,
                                                   options_.tls_keys, c.fd.get(),
                                                   storage::tls_psk_priority_with_1_2);
  } catch (const std::exception& e) {
    ZC_LOG_ERROR("nbd: TLS session: {}", e.what());
    ++counters_.tls_failures;
    close_connection(c);
    return;
  }
  continue_tls(c);
}

void server::continue_tls(connection& c) {
  switch (c.tls->handshake()) {
    case storage::tls_session::step::again:
      update_interest(c);
      return;
    case storage::tls_session::step::failed:
      ZC_LOG_WARN("nbd: TLS handshake failed: {}: closed", c.tls->error());
      ++counters_.tls_failures;
      close_connection(c);
      return;
    case storage::tls_session::step::done:
      break;
  }
  ++counters_.tls_sessions;
  ZC_LOG_DEBUG("nbd: TLS session with '{}'", c.tls->identity());
  // Option haggling starts again, encrypted; the client may have sent its next option already.
  c.at = connection::phase::option_header;
  update_interest(c);
  if (c.tls_pending()) on_readable(c);
}

void server::reap(connection& c) {
  if (c.dead && c.in_flight == 0) connections_.erase(&c);
}

}  // namespace zc::nbd
