#include "storage/comch_session_server.hpp"

#include "storage/internal/comch_frame.hpp"
#include "storage/internal/fd_io.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/log.hpp"
#include "core/thread.hpp"

namespace zc::storage {
namespace internal {

// One accepted client, shared by the server thread and its session's channel. The fields under
// `mutex` move between them; the rest is fixed at accept.
struct session_client {
  comch::connection* conn = nullptr;  // pinned until the server forgets this client
  uint64_t conn_id = 0;
  pid_t pid = 0;
  std::string name;  // "client pid N"
  size_t max_body_size = 0;
  uint32_t max_send_size = 0;
  uint32_t max_queued_sends = 0;
  int server_wake = -1;  // the server's eventfd
  unique_fd wake;        // ours: readable when the inbox has something

  struct inbound {
    std::vector<uint8_t> bytes;  // one comch message (a frame)
    bool lost = false;           // ... or the connection's loss
    status code = status::success;
    std::string text;
  };

  std::mutex mutex;
  std::deque<inbound> inbox;
  std::deque<consumer_event> consumer_events;
  uint64_t dropped_consumer_events = 0;
  std::deque<std::vector<uint8_t>> outbox;        // frames waiting for a comch send task
  size_t in_flight = 0;                           // frames with a send task
  bool taken = false;                             // a session has the channel
  bool released = false;                          // ... and destroyed it
  std::chrono::steady_clock::time_point arrived;  // accepted (for admission_wait)
  bool close_requested = false;                   // the session or a bound wants it closed
  bool gone = false;                              // the server saw the connection close
  std::string close_reason;                       // why a bound closed it, for the session

  void notify_session() noexcept { signal(wake.get()); }
  void notify_server() noexcept { signal(server_wake); }
  static void signal(int fd) noexcept {
    const uint64_t one = 1;
    (void)!::write(fd, &one, sizeof(one));
  }
};

}  // namespace internal

namespace {

using clock = std::chrono::steady_clock;
using internal::session_client;

constexpr std::chrono::milliseconds stop_limit{2000};
constexpr std::chrono::milliseconds longest_sleep{100};

unique_fd make_eventfd() {
  unique_fd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd)
    throw status_error(status::operating_system,
                       fmt::format("Failed to create an eventfd: {}", internal::error_text(errno)));
  return fd;
}

void drain(int fd) noexcept {
  uint64_t count = 0;
  (void)!::read(fd, &count, sizeof(count));
}

}  // namespace

// A send in flight: its bytes stay here until the task completes.
struct comch_session_server::send_context {
  std::shared_ptr<session_client> client;  // a session's send ...
  uint64_t refused_id = 0;                 // ... or the answer to a refused client
  std::vector<uint8_t> bytes;
};

// ---- comch_session_channel -------------------------------------------------------------------

comch_session_channel::comch_session_channel(std::shared_ptr<session_client> client)
    : client_(std::move(client)) {}

comch_session_channel::~comch_session_channel() {
  {
    std::lock_guard lock(client_->mutex);
    client_->released = true;
    client_->close_requested = true;
  }
  client_->notify_server();
}

int comch_session_channel::wait_fd() const noexcept {
  return client_->wake.get();
}

pid_t comch_session_channel::peer_pid() const noexcept {
  return client_->pid;
}

const std::string& comch_session_channel::peer_name() const noexcept {
  return client_->name;
}

status comch_session_channel::send(const message& msg) {
  if (closed_) {
    last_error_ = "control channel is not connected";
    return status::not_connected;
  }
  std::vector<uint8_t> frame;
  try {
    encode_to(msg, frame);
  } catch (const status_error& e) {
    last_error_ = e.what();
    return e.code();
  }
  const size_t body = frame.size() - frame_header_size;
  if (body > client_->max_body_size) {
    last_error_ = fmt::format("{} body of {} bytes exceeds the channel maximum of {}",
                              to_string(msg.type), body, client_->max_body_size);
    return status::too_big;
  }
  if (frame.size() > client_->max_send_size) {
    last_error_ = fmt::format("{} frame of {} bytes exceeds the comch message maximum of {}",
                              to_string(msg.type), frame.size(), client_->max_send_size);
    return status::too_big;
  }
  {
    std::lock_guard lock(client_->mutex);
    if (client_->gone) {
      last_error_ = fmt::format("{} closed the connection", client_->name);
      return status::connection_reset;
    }
    const size_t queued = client_->outbox.size() + client_->in_flight;
    if (queued >= client_->max_queued_sends) {
      last_error_ = fmt::format("{} not sent: {} control messages already queued for {}",
                                to_string(msg.type), queued, client_->name);
      return status::full;
    }
    client_->outbox.push_back(std::move(frame));
  }
  client_->notify_server();
  return status::success;
}

void comch_session_channel::end(status code, std::string text) {
  closed_ = true;
  last_error_ = std::move(text);
  {
    std::lock_guard lock(client_->mutex);
    client_->close_requested = true;
    client_->inbox.clear();
    client_->outbox.clear();
    client_->consumer_events.clear();
  }
  client_->notify_server();
  ZC_SDK_LOG_DEBUG("comch session channel: {} ({})", last_error_, status_name(code));
}

receive_result comch_session_channel::poll() {
  if (closed_) return {};
  drain(client_->wake.get());  // before the check: a later arrival signals again
  session_client::inbound in;
  {
    std::lock_guard lock(client_->mutex);
    if (client_->inbox.empty()) return {};
    in = std::move(client_->inbox.front());
    client_->inbox.pop_front();
  }
  if (in.lost) {
    closed_ = true;
    last_error_ = in.text;
    return {std::nullopt, in.code, std::move(in.text)};
  }
  internal::comch_frame f = internal::decode_comch_message(in.bytes, client_->max_body_size);
  if (f.msg) return {std::move(f.msg), status::success, {}};
  std::string text = fmt::format("malformed control message from {}: {}", client_->name, f.why);
  end(f.code, text);
  return {std::nullopt, f.code, std::move(text)};
}

void comch_session_channel::close() noexcept {
  if (closed_) return;
  end(status::success, "control channel closed");
}

comch::connection* comch_session_channel::connection() const noexcept {
  if (closed_ || !client_->conn->connected()) return nullptr;
  return client_->conn;
}

std::optional<consumer_event> comch_session_channel::take_consumer_event() {
  std::lock_guard lock(client_->mutex);
  if (client_->consumer_events.empty()) return std::nullopt;
  consumer_event e = client_->consumer_events.front();
  client_->consumer_events.pop_front();
  return e;
}

size_t comch_session_channel::queued_sends() const noexcept {
  std::lock_guard lock(client_->mutex);
  return client_->outbox.size() + client_->in_flight;
}

// ---- comch_session_server --------------------------------------------------------------------

comch_session_server::comch_session_server(std::string_view representor, std::string_view name,
                                           uint32_t max_sessions,
                                           const comch_channel_options& options)
    : options_(options),
      max_sessions_(max_sessions),
      max_body_size_(internal::checked_max_body_size(options)),
      engine_(core::poll_mode::event),
      wake_(make_eventfd()),
      timer_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      server_(
          engine_,
          comch::server_config{
              .representor = std::string(representor),
              .name = std::string(name),
              .max_msg_size = options.max_msg_size,
              .send_tasks =
                  std::max<uint32_t>(options.send_tasks, max_sessions * sends_per_client +
                                                             uint32_t(max_refused_lingering)),
              .on_send_done = [this](comch::send_task& t) { on_send_done(t); },
              .on_send_error = [this](comch::send_task& t) { on_send_done(t); },
              .events = {.on_message = [this](comch::connection& c,
                                              std::span<const uint8_t> m) { on_message(c, m); },
                         .on_consumer_new = [this](comch::connection& c,
                                                   uint32_t id) { on_consumer(c, id, true); },
                         .on_consumer_expired = [this](comch::connection& c,
                                                       uint32_t id) { on_consumer(c, id, false); }},
              .on_connect = [this](comch::connection& c) { on_connect(c); },
              .on_disconnect = [this](comch::connection& c) { on_disconnect(c); }}) {
  if (max_sessions_ == 0 || max_sessions_ > max_sessions_limit)
    throw status_error(status::bad_config, fmt::format("max sessions {} is outside 1..{}",
                                                       max_sessions_, max_sessions_limit));
  if (!timer_ || !epoll_)
    throw status_error(
        status::operating_system,
        fmt::format("Failed to create an epoll set or timer: {}", internal::error_text(errno)));
  internal::watch_readable(epoll_.get(), server_.wait_fd());
  internal::watch_readable(epoll_.get(), timer_.get());
  internal::watch_readable(epoll_.get(), wake_.get());
  server_.start();  // throws in_use when the name is taken
}

comch_session_server::~comch_session_server() {
  if (server_.state() != core::context_state::idle) {
    (void)server_.stop();
    const bool idle = engine_.run_until(
        [this] { return server_.state() == core::context_state::idle; }, stop_limit);
    if (!idle) ZC_SDK_LOG_ERROR("comch session server: the comch server did not stop in time");
  }
  for (auto& [conn, client] : clients_) {
    std::lock_guard lock(client->mutex);
    if (client->taken && !client->released)
      ZC_SDK_LOG_ERROR("comch session server destroyed while the session of {} still runs",
                       client->name);
    client->conn->unpin();
  }
  clients_.clear();
  std::lock_guard lock(mutex_);
  waiting_.clear();
}

void comch_session_server::wake() noexcept {
  session_client::signal(wake_.get());
}

uint64_t comch_session_server::refused_clients() const noexcept {
  std::lock_guard lock(mutex_);
  return refused_count_;
}

size_t comch_session_server::active_sessions() const noexcept {
  size_t n = 0;
  for (const auto& [conn, client] : clients_) {
    std::lock_guard lock(client->mutex);
    // Waiting or served: a client that left while waiting is forgotten at once (on_disconnect).
    if (!client->released) ++n;
  }
  return n;
}

void comch_session_server::refuse(comch::connection& c, std::string reason) {
  {
    std::lock_guard lock(mutex_);
    ++refused_count_;
  }
  // Answered when its first request comes; past the bound on lingering refusals, closed now.
  const bool linger = refused_.size() < max_refused_lingering;
  ZC_SDK_LOG_WARN("comch session server \"{}\": refused client pid {}: {}{}", server_.config().name,
                  c.peer_pid(), reason,
                  linger ? "" : " (closed without an answer: too many refusals pending)");
  refused_[&c] = {linger ? clock::now() + refusal_linger : clock::now(), !linger,
                  std::move(reason)};
}

void comch_session_server::on_connect(comch::connection& c) {
  const std::string name = fmt::format("client pid {}", c.peer_pid());
  if (active_sessions() >= max_sessions_) {
    refuse(c, fmt::format("the service serves {} sessions, its limit (--max-sessions {}): try "
                          "again once one ends",
                          max_sessions_, max_sessions_));
    return;
  }
  auto client = std::make_shared<session_client>();
  try {
    client->wake = make_eventfd();
  } catch (const status_error& e) {
    refuse(c, fmt::format("the service cannot take a client now: {}", e.what()));
    return;
  }
  client->conn = &c;
  client->conn_id = c.id();
  client->pid = c.peer_pid();
  client->name = name;
  client->max_body_size = max_body_size_;
  client->max_send_size = c.max_send_size();
  client->max_queued_sends = options_.max_queued_sends;
  client->server_wake = wake_.get();
  client->arrived = clock::now();
  c.pin();
  clients_[&c] = client;
  {
    std::lock_guard lock(mutex_);
    waiting_.push_back(std::move(client));
  }
  arrived_.notify_one();
  ZC_SDK_LOG_INFO("comch session server \"{}\": {} connected", server_.config().name, name);
}

void comch_session_server::on_disconnect(comch::connection& c) {
  refused_.erase(&c);
  auto it = clients_.find(&c);
  if (it == clients_.end()) return;
  {
    // Gone before a session took it: forgotten now (a flood of clients that connect and leave
    // while every session thread is busy must not pile up).
    std::lock_guard lock(mutex_);
    if (auto w = std::find(waiting_.begin(), waiting_.end(), it->second); w != waiting_.end()) {
      waiting_.erase(w);
      c.unpin();
      clients_.erase(it);
      return;
    }
  }
  session_client& client = *it->second;
  {
    std::lock_guard lock(client.mutex);
    client.gone = true;
    std::string text = client.close_reason.empty()
                           ? fmt::format("{} closed the connection", client.name)
                           : client.close_reason;
    client.inbox.push_back({{}, true, status::connection_reset, std::move(text)});
  }
  client.notify_session();
}

void comch_session_server::on_message(comch::connection& c, std::span<const uint8_t> bytes) {
  if (refused_.contains(&c)) {
    answer_refused(c, bytes);
    return;
  }
  auto it = clients_.find(&c);
  if (it == clients_.end()) return;
  session_client& client = *it->second;
  {
    std::lock_guard lock(client.mutex);
    if (client.close_requested) return;
    if (client.inbox.size() >= max_unread_messages) {
      // Closed after this round (serve_clients); the session hears why.
      client.close_requested = true;
      client.close_reason = fmt::format("{} sent more than {} messages its session has not read",
                                        client.name, max_unread_messages);
      ZC_SDK_LOG_WARN("comch session server: {}", client.close_reason);
    } else {
      client.inbox.push_back({{bytes.begin(), bytes.end()}, false, status::success, {}});
    }
  }
  client.notify_session();
}

void comch_session_server::on_consumer(comch::connection& c, uint32_t id, bool created) {
  auto it = clients_.find(&c);
  if (it == clients_.end()) return;
  session_client& client = *it->second;
  {
    std::lock_guard lock(client.mutex);
    if (client.consumer_events.size() >= max_consumer_events) {
      if (client.dropped_consumer_events++ == 0)
        ZC_SDK_LOG_WARN("comch session server: {} consumer events of {} not taken; dropping",
                        client.consumer_events.size(), client.name);
      return;
    }
    client.consumer_events.push_back(
        {created ? consumer_event::kind::created : consumer_event::kind::expired, id});
  }
  client.notify_session();
}

void comch_session_server::answer_refused(comch::connection& c, std::span<const uint8_t> bytes) {
  refusal& r = refused_[&c];
  if (r.answered) return;
  r.answered = true;  // one answer; the connection closes once it went out (or at once)
  decode_result d = decode_frame(bytes, max_body_size_);
  if (d.outcome != decode_outcome::message) return;
  auto ctx = std::make_unique<send_context>();
  ctx->refused_id = c.id();
  try {
    encode_to(make_error_response(d.msg, status::in_use, r.reason), ctx->bytes);
  } catch (const status_error&) {
    return;
  }
  if (ctx->bytes.size() > c.max_send_size() || !submit(c, *ctx)) return;
  (void)ctx.release();  // the send's now
  r.answered = false;   // closed when the send completes
  r.deadline = clock::now() + refusal_linger;
}

void comch_session_server::on_send_done(comch::send_task& task) noexcept {
  auto* ctx = static_cast<send_context*>(task.get_user_data().ptr);
  const bool refused_answer = ctx->refused_id != 0;
  comch::connection& to = task.target();
  task.free();
  if (ctx->client) {
    std::lock_guard lock(ctx->client->mutex);
    --ctx->client->in_flight;
  } else if (refused_answer) {
    auto it = refused_.find(&to);
    if (it != refused_.end() && to.id() == ctx->refused_id) it->second.answered = true;
  }
  delete ctx;
}

bool comch_session_server::submit(comch::connection& c, send_context& ctx) noexcept {
  comch::send_task* task = server_.allocate_send(c, ctx.bytes);
  if (task == nullptr) return false;
  task->set_user_data(core::make_user_data(&ctx));
  if (const status s = server_.submit(*task); !ok(s)) {
    task->free();
    ZC_SDK_LOG_DEBUG("comch session server: send failed: {}", status_name(s));
    return false;
  }
  return true;
}

void comch_session_server::refuse_unclaimed() {
  const auto now = clock::now();
  std::vector<std::shared_ptr<session_client>> unclaimed;
  {
    std::lock_guard lock(mutex_);
    while (!waiting_.empty() && now - waiting_.front()->arrived >= admission_wait) {
      unclaimed.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
  }
  for (auto& client : unclaimed) {
    std::optional<std::vector<uint8_t>> first;
    {
      std::lock_guard lock(client->mutex);
      if (!client->inbox.empty() && !client->inbox.front().lost)
        first = std::move(client->inbox.front().bytes);
    }
    comch::connection& c = *client->conn;
    clients_.erase(&c);
    c.unpin();  // still open: the refusal closes it
    refuse(c, fmt::format("no session of the service was ready for it within {} ms (each is "
                          "dialling its storage): try again shortly",
                          admission_wait.count()));
    if (first) answer_refused(c, *first);
  }
}

void comch_session_server::serve_clients() {
  refuse_unclaimed();
  std::vector<comch::connection*> close;
  std::vector<const comch::connection*> forget;
  for (auto& [key, client] : clients_) {
    // Sends, up to the client's share of comch's send tasks; the rest waits for the next round.
    for (;;) {
      std::vector<uint8_t> bytes;
      {
        std::lock_guard lock(client->mutex);
        if (client->gone || client->close_requested || client->outbox.empty() ||
            client->in_flight >= sends_per_client)
          break;
        bytes = std::move(client->outbox.front());
        client->outbox.pop_front();
        ++client->in_flight;
      }
      auto ctx = std::make_unique<send_context>();
      ctx->bytes = std::move(bytes);
      ctx->client = client;
      if (submit(*client->conn, *ctx)) {
        (void)ctx.release();  // the send's now: freed when it completes
        continue;
      }
      // No send task free (or the connection failed: its loss comes next round): put it back.
      std::lock_guard lock(client->mutex);
      client->outbox.push_front(std::move(ctx->bytes));
      --client->in_flight;
      break;
    }
    std::lock_guard lock(client->mutex);
    if (client->gone) {
      if (client->released) forget.push_back(key);
    } else if (client->close_requested) {
      close.push_back(client->conn);
    }
  }
  for (const comch::connection* key : forget) {
    auto it = clients_.find(key);
    it->second->conn->unpin();
    clients_.erase(it);
  }
  const auto now = clock::now();
  for (auto& [conn, r] : refused_)
    if (r.answered || now >= r.deadline) close.push_back(conn);
  // Outside the loops: each disconnect runs on_disconnect, which edits refused_.
  for (comch::connection* c : close) server_.disconnect(*c);
}

void comch_session_server::rearm_timer() noexcept {
  // comch's own deadlines (handshakes, the accept pause), or now when it has buffered work.
  internal::arm_deadline_timer(timer_.get(), server_);
}

void comch_session_server::sleep(std::chrono::milliseconds at_most) noexcept {
  // The stop descriptor wakes the first sleep after a stop; it stays readable, so not after.
  const int stop_fd = core::stop_requested() ? -1 : core::stop_signal_fd();
  pollfd fds[2] = {{epoll_.get(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
  (void)::poll(fds, stop_fd >= 0 ? 2 : 1, static_cast<int>(at_most.count()));
}

void comch_session_server::run(const std::function<bool()>& done) {
  uint64_t failures = 0;
  for (;;) {
    drain(timer_.get());
    drain(wake_.get());
    try {
      engine_.progress();
      serve_clients();
    } catch (const std::exception& e) {
      // The sessions still need this thread to end: a failed round is logged, not fatal.
      if (failures++ % 1000 == 0)
        ZC_SDK_LOG_ERROR("comch session server: a round failed: {} ({} so far)", e.what(),
                         failures);
    }
    if (done()) return;
    rearm_timer();
    // A refusal's linger and the stop signal are checked at least this often.
    sleep(longest_sleep);
  }
}

std::unique_ptr<comch_session_channel> comch_session_server::next_client(
    std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  std::unique_lock lock(mutex_);
  for (;;) {
    if (core::stop_requested()) return nullptr;
    while (!waiting_.empty()) {
      std::shared_ptr<session_client> client = std::move(waiting_.front());
      waiting_.pop_front();
      {
        // Never gone: a client that leaves while waiting is taken out of waiting_ at once.
        std::lock_guard client_lock(client->mutex);
        client->taken = true;
      }
      return std::unique_ptr<comch_session_channel>(new comch_session_channel(std::move(client)));
    }
    if (core::stop_requested()) return nullptr;
    if (arrived_.wait_until(lock, std::min(deadline, clock::now() + longest_sleep)) ==
            std::cv_status::timeout &&
        clock::now() >= deadline && waiting_.empty())
      return nullptr;
  }
}

}  // namespace zc::storage
