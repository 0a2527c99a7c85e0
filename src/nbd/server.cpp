// The NBD server: construction and listeners, the epoll loop, accepting connections, reading
// their input, sending their replies, deadlines and closing. The handshake, transmission and the
// sharing of IO memory live beside it (server_internal.hpp names them).
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
#include "nbd/server_internal.hpp"

namespace zc::nbd {

using namespace server_detail;

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
    if (fd < 0) continue;  // a backend that completes on the server's thread has no fd
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
  std::lock_guard lock(adopted_mutex_);
  for (int fd : adopted_) ::close(fd);
}

void server::share_accepts_with(const std::vector<server*>& group) {
  group_ = group;
  for (server* s : group_) s->group_open_ = group_open_;
}

void server::adopt_connection(int fd) noexcept {
  {
    std::lock_guard lock(adopted_mutex_);
    adopted_.push_back(fd);
  }
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void server::take_adopted() {
  {
    std::lock_guard lock(adopted_mutex_);
    adopting_.swap(adopted_);
  }
  for (int fd : adopting_) {
    storage::unique_fd owned(fd);
    if (draining_ || ended_) {
      group_open_->fetch_sub(1, std::memory_order_relaxed);
      continue;  // closed: this server no longer serves
    }
    add_connection(std::move(owned));
  }
  adopting_.clear();
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

void server::run() {
  while (step(-1).serving) {
  }
}

void server::mark(connection& c) {
  if (!c.dirty) {
    c.dirty = true;
    dirty_.push_back(&c);
  }
}

void server::let_waiters_on() {
  memory_freed_ = false;
  if (lock_released_) retry_lock_waiting();
  if (!wanting_.empty()) retry_waiting();
}

server::pass_result server::step(int wait_ms) {
  if (ended_) return {.serving = false};
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
  bool busy = false;
  if (stopping() && !draining_) {
    begin_drain();
    busy = true;
  }
  if (draining_) {
    bool left = ios_outstanding_ != 0;
    for (auto& [p, c] : connections_)
      if (!c->dead && !c->out.empty()) left = true;
    if (!left || clock_type::now() >= drain_deadline_) {
      end_serving();
      return {.serving = false, .busy = true};
    }
  }
  int timeout_ms = draining_ ? 50 : next_deadline_ms;
  if (!paused_listeners_.empty())
    timeout_ms = timeout_ms < 0 ? static_cast<int>(accept_pause.count())
                                : std::min(timeout_ms, static_cast<int>(accept_pause.count()));
  next_wake_ =
      timeout_ms < 0 ? clock_type::time_point::max() : now_ + std::chrono::milliseconds(timeout_ms);
  if (!dirty_.empty() || storage_.has_completions()) timeout_ms = 0;  // work is waiting
  if (wait_ms >= 0) timeout_ms = timeout_ms < 0 ? wait_ms : std::min(timeout_ms, wait_ms);
  std::array<epoll_event, epoll_batch> events;
  const int n = ::epoll_wait(epoll_.get(), events.data(), epoll_batch, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return {.serving = true, .busy = busy};
    throw_errno("epoll_wait");
  }
  busy |= n > 0;
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
      take_adopted();
    } else if (fd == storage_.completion_fd()) {
      take_completions_now();
    } else {
      accept_from(fd);
    }
  }
  if (storage_.has_completions()) {
    take_completions_now();
    busy = true;
  }
  busy |= !dirty_.empty();
  if (busy) expect_deadlines();
  serve_dirty();
  return {.serving = true, .busy = busy};
}

void server::expect_deadlines() noexcept {
  auto bound = options_.handshake_timeout;
  for (auto b : {options_.request_timeout, options_.idle_timeout})
    if (b.count() != 0) bound = std::min(bound, b);
  next_wake_ = std::min(next_wake_, now_ + bound);
}

bool server::serve_completions() {
  if (ended_ || !storage_.has_completions()) return false;
  now_ = clock_type::now();
  take_completions_now();
  expect_deadlines();
  serve_dirty();
  return true;
}

void server::take_completions_now() {
  completed_.clear();
  storage_.take_completions(completed_);
  for (io* x : completed_) {
    --ios_outstanding_;
    auto* c = static_cast<connection*>(x->owner);
    on_io_done(*c, static_cast<uint32_t>(x->tag), *x);
    mark(*c);
  }
  // Memory and blocks came back: the waiters they let go are marked as they are served.
  if (lock_released_) retry_lock_waiting();
  retry_waiting();
}

// Replies out, input processed again where reading is allowed once more, interest updated.
void server::serve_dirty() {
  while (!dirty_.empty()) {
    serving_now_.swap(dirty_);
    for (connection* c : serving_now_) c->dirty = false;
    for (connection* c : serving_now_) {
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
    serving_now_.clear();
    if (dirty_.empty() && (memory_freed_ || lock_released_)) let_waiters_on();
  }
}

void server::begin_drain() {
  draining_ = true;
  drain_deadline_ = clock_type::now() + options_.drain_timeout;
  for (auto& l : listeners_) (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, l.get(), nullptr);
  listeners_.clear();
  paused_listeners_.clear();
  take_adopted();  // closed: nothing new is served
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

void server::end_serving() {
  ended_ = true;
  next_wake_ = clock_type::time_point::max();
  for (auto& [p, c] : connections_)
    if (!c->dead) close_connection(*c);
  std::erase_if(connections_, [](auto& e) { return e.second->in_flight == 0; });
  dirty_.clear();
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
    if (group_open_->load(std::memory_order_relaxed) >= options_.max_connections) {
      ++counters_.refused;
      if (counters_.refused == 1)
        ZC_LOG_WARN("nbd: more than {} connections: closing the extra ones",
                    options_.max_connections);
      continue;  // closed by unique_fd
    }
    group_open_->fetch_add(1, std::memory_order_relaxed);
    const int one = 1;
    // Both fail harmlessly on a Unix socket.
    (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) == 0) {
      (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_KEEPIDLE, &keep_alive_idle_s, sizeof(int));
      (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_KEEPINTVL, &keep_alive_interval_s, sizeof(int));
      (void)::setsockopt(fd.get(), IPPROTO_TCP, TCP_KEEPCNT, &keep_alive_count, sizeof(int));
    }
    server* to = group_.empty() ? this : group_[next_in_group_++ % group_.size()];
    if (to == this)
      add_connection(std::move(fd));
    else
      to->adopt_connection(fd.release());
  }
}

void server::add_connection(storage::unique_fd fd) {
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
    group_open_->fetch_sub(1, std::memory_order_relaxed);
    return;
  }
  c.interest = EPOLLIN;
  c.handshake_deadline = now_ + options_.handshake_timeout;
  c.last_input = now_;
  c.output_waits = now_;
  reply greeting;
  append_greeting(greeting.extra, handshake_flag::fixed_newstyle | handshake_flag::no_zeroes);
  c.out.push_back(std::move(greeting));
  ++counters_.connections;
  connections_.emplace(&c, std::move(owned));
  mark(c);
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
      if (r.borrowed != nullptr) add(const_cast<char*>(r.borrowed->data()), r.borrowed->size());
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
  group_open_->fetch_sub(1, std::memory_order_relaxed);
  erase(wanting_, &c);
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

void server::reap(connection& c) {
  if (c.dead && c.in_flight == 0) connections_.erase(&c);
}

}  // namespace zc::nbd
