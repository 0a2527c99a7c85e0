#include "storage/comch_control_channel.hpp"

#include "storage/internal/comch_frame.hpp"
#include "storage/internal/fd_io.hpp"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "core/log.hpp"
#include "core/thread.hpp"

namespace zc::storage {
using internal::error_text;

namespace {

using clock = std::chrono::steady_clock;

// How long closing a comch context may take to settle its send tasks (they fail at once; one
// progress round usually suffices).
constexpr std::chrono::milliseconds stop_limit{2000};

}  // namespace

// ---- comch_control_channel -----------------------------------------------------------------

comch_control_channel::comch_control_channel(const comch_channel_options& options)
    : options_(options),
      engine_(core::poll_mode::event),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      timer_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {
  if (!epoll_ || !timer_)
    throw status_error(
        status::operating_system,
        fmt::format("Failed to create an epoll set or timer: {}", error_text(errno)));
  max_body_size_ = internal::checked_max_body_size(options_);
  ring_.resize(options_.max_queued_sends);
  internal::watch_readable(epoll_.get(), timer_.get());
}

comch_control_channel::~comch_control_channel() = default;

void comch_control_channel::watch_context(core::context& ctx) {
  context_ = &ctx;
  internal::watch_readable(epoll_.get(), ctx.wait_fd());
}

std::string comch_control_channel::peer_name(const comch::connection& c) const {
  return fmt::format("{} pid {}", peer_role_, c.peer_pid());
}

void comch_control_channel::stop_context() noexcept {
  if (context_ == nullptr) return;
  dropping_ = true;
  if (context_->state() != core::context_state::idle) {
    (void)context_->stop();
    const bool idle = engine_.run_until(
        [this] { return context_->state() == core::context_state::idle; }, stop_limit);
    if (!idle) ZC_SDK_LOG_ERROR("comch control channel: context did not stop in time");
  }
  dropping_ = false;
}

void comch_control_channel::connected(comch::connection& c) {
  current_ = &c;
  ++generation_;
  current_peer_ = peer_name(c);
  events_.push_back({event::kind::connected, generation_, {}, status::success, current_peer_});
}

void comch_control_channel::report_current() {
  if (!events_.empty() && events_.front().what == event::kind::connected) {
    reported_ = events_.front().generation;
    reported_peer_ = std::move(events_.front().text);
    events_.pop_front();
  }
}

void comch_control_channel::lost(const comch::connection* c, status why, std::string text) {
  if (c == nullptr || c != current_) return;
  current_ = nullptr;
  drop_waiting_sends();
  if (!dropping_) events_.push_back({event::kind::lost, generation_, {}, why, std::move(text)});
}

void comch_control_channel::received(comch::connection& c, std::span<const uint8_t> bytes) {
  if (&c != current_) return;
  events_.push_back(
      {event::kind::message, generation_, {bytes.begin(), bytes.end()}, status::success, {}});
}

void comch_control_channel::consumer(comch::connection& c, uint32_t id, bool created) {
  if (&c != current_) return;
  if (consumer_events_.size() >= max_consumer_events) {
    if (dropped_events_++ == 0)
      ZC_SDK_LOG_WARN("comch control channel: {} consumer events queued and not taken; dropping",
                      consumer_events_.size());
    return;
  }
  consumer_events_.push_back(
      {created ? consumer_event::kind::created : consumer_event::kind::expired, id});
}

std::optional<consumer_event> comch_control_channel::take_consumer_event() {
  if (consumer_events_.empty()) return std::nullopt;
  consumer_event e = consumer_events_.front();
  consumer_events_.pop_front();
  return e;
}

comch::connection* comch_control_channel::connection() const noexcept {
  if (current_ == nullptr || reported_ != generation_ || !current_->connected()) return nullptr;
  return current_;
}

void comch_control_channel::send_completed(comch::send_task& task) noexcept {
  if (!ok(task.result()))
    ZC_SDK_LOG_DEBUG("comch control send failed: {}", status_name(task.result()));
  const size_t index = static_cast<size_t>(task.get_user_data().u64);
  task.free();
  if (index >= ring_.size()) return;
  ring_[index].done = true;
  // Completions may come out of order across connections: retire the oldest while done.
  while (count_ != 0 && ring_[head_].done) {
    ring_[head_].done = false;
    head_ = (head_ + 1) % ring_.size();
    --count_;
    --submitted_;
  }
}

void comch_control_channel::drop_waiting_sends() noexcept {
  count_ = submitted_;  // in-flight sends stay until their tasks complete
}

status comch_control_channel::pump() {
  while (submitted_ < count_ && current_ != nullptr) {
    const size_t index = (head_ + submitted_) % ring_.size();
    comch::send_task* task = allocate_send(*current_, ring_[index].bytes);
    if (task == nullptr) break;  // every comch send task is in flight: wait for a completion
    task->set_user_data(core::make_user_data(index));
    const status s = submit(*task);
    if (!ok(s)) {
      task->free();
      return fail(s, fmt::format("send to {} failed: {}", current_peer_, status_name(s)),
                  generation_)
          .code;
    }
    ++submitted_;
  }
  return status::success;
}

status comch_control_channel::send(const message& msg) {
  if (!is_connected()) {
    last_error_ = "control channel is not connected";
    return status::not_connected;
  }
  if (current_ == nullptr || generation_ != reported_) {
    last_error_ = fmt::format("{} closed the connection", reported_peer_);
    return status::connection_reset;
  }
  scratch_.clear();
  try {
    encode_to(msg, scratch_);
  } catch (const status_error& e) {
    last_error_ = e.what();
    return e.code();
  }
  const size_t body = scratch_.size() - frame_header_size;
  if (body > max_body_size_) {
    last_error_ = fmt::format("{} body of {} bytes exceeds the channel maximum of {}",
                              to_string(msg.type), body, max_body_size_);
    return status::too_big;
  }
  if (scratch_.size() > current_->max_send_size()) {
    last_error_ = fmt::format("{} frame of {} bytes exceeds the comch message maximum of {}",
                              to_string(msg.type), scratch_.size(), current_->max_send_size());
    return status::too_big;
  }
  if (count_ == ring_.size()) {
    last_error_ = fmt::format("{} not sent: {} control messages already queued for {}",
                              to_string(msg.type), count_, current_peer_);
    return status::full;
  }
  slot& s = ring_[(head_ + count_) % ring_.size()];
  s.bytes.swap(scratch_);  // the slot's old buffer becomes the next scratch: no allocation
  s.done = false;
  ++count_;
  const status st = pump();
  if (ok(st) && submitted_ < count_ && events_.size() < comch::default_recv_queue_size) {
    // Every comch send task is taken: a progress round retires those whose bytes are in the
    // socket (and queues whatever arrived for poll()), so sends wait only on a full socket. Not
    // while poll() has a round's worth of messages to hand out: that keeps the queue bounded.
    if (auto failure = progress_once()) return failure->code;
  }
  return st;
}

receive_result comch_control_channel::fail(status code, std::string text, uint64_t generation) {
  ZC_SDK_LOG_DEBUG("comch control channel: {}", text);
  last_error_ = text;
  if (current_ != nullptr && generation == generation_) {
    comch::connection* c = current_;
    dropping_ = true;
    drop(*c);
    dropping_ = false;
    current_ = nullptr;
    drop_waiting_sends();
  }
  std::erase_if(events_, [generation](const event& e) { return e.generation == generation; });
  if (reported_ == generation) reported_ = 0;
  return {std::nullopt, code, std::move(text)};
}

void comch_control_channel::close() noexcept {
  if (current_ != nullptr) {
    comch::connection* c = current_;
    dropping_ = true;
    drop(*c);
    dropping_ = false;
    current_ = nullptr;
  }
  drop_waiting_sends();
  events_.clear();
  reported_ = 0;
}

void comch_control_channel::rearm_timer() noexcept {
  // The comch context's own deadlines (handshakes, redials), or now when it has buffered work.
  internal::arm_deadline_timer(timer_.get(), *context_);
}

void comch_control_channel::drain_timer() noexcept {
  uint64_t expirations = 0;
  (void)!::read(timer_.get(), &expirations, sizeof(expirations));
}

std::optional<receive_result> comch_control_channel::progress_once() {
  drain_timer();
  engine_.progress();
  after_progress();
  std::optional<receive_result> failure;
  if (current_ != nullptr && submitted_ < count_) {
    const status s = pump();
    if (!ok(s)) failure = receive_result{std::nullopt, s, last_error_};
  }
  rearm_timer();
  return failure;
}

void comch_control_channel::sleep_until(clock::time_point deadline) const {
  const auto left = deadline - clock::now();
  if (left <= clock::duration::zero()) return;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  pollfd fds[2] = {{epoll_.get(), POLLIN, 0}, {core::stop_signal_fd(), POLLIN, 0}};
  (void)::poll(fds, fds[1].fd >= 0 ? 2 : 1, ms > 60'000 ? 60'000 : static_cast<int>(ms));
}

receive_result comch_control_channel::take_message(event& e) {
  internal::comch_frame f = internal::decode_comch_message(e.bytes, max_body_size_);
  if (f.msg) return {std::move(f.msg), status::success, {}};
  return fail(f.code, fmt::format("malformed control message from {}: {}", reported_peer_, f.why),
              e.generation);
}

receive_result comch_control_channel::poll() {
  if (events_.empty()) {
    if (auto failure = progress_once()) return std::move(*failure);
  }
  if (events_.empty()) return {};
  event e = std::move(events_.front());
  events_.pop_front();
  switch (e.what) {
    case event::kind::connected:
      // The poll() that reports a connection returns no message (control_channel's contract).
      reported_ = e.generation;
      reported_peer_ = std::move(e.text);
      ZC_SDK_LOG_INFO("comch control channel: {} connected", reported_peer_);
      return {};
    case event::kind::lost:
      if (reported_ == e.generation) reported_ = 0;
      last_error_ = e.text;
      return {std::nullopt, e.code, std::move(e.text)};
    case event::kind::message:
      return take_message(e);
  }
  return {};
}

// ---- comch_control_server ------------------------------------------------------------------

comch_control_server::comch_control_server(std::string_view representor, std::string_view name,
                                           const comch_channel_options& options)
    : comch_control_channel(options),
      server_(
          engine(),
          comch::server_config{
              .representor = std::string(representor),
              .name = std::string(name),
              .max_msg_size = options.max_msg_size,
              .send_tasks = options.send_tasks,
              .on_send_done = [this](comch::send_task& t) { send_completed(t); },
              .on_send_error = [this](comch::send_task& t) { send_completed(t); },
              .events = {.on_message = [this](comch::connection& c,
                                              std::span<const uint8_t> m) { received(c, m); },
                         .on_consumer_new = [this](comch::connection& c,
                                                   uint32_t id) { consumer(c, id, true); },
                         .on_consumer_expired = [this](comch::connection& c,
                                                       uint32_t id) { consumer(c, id, false); }},
              .on_connect =
                  [this](comch::connection& c) {
                    if (current() == nullptr) {
                      connected(c);
                      return;
                    }
                    // One session per service: a second initiator is turned away now.
                    ZC_SDK_LOG_WARN("comch control server \"{}\": rejected {} while serving {}",
                                    server_.config().name, peer_name(c), peer_name(*current()));
                    ++refused_;
                    intruders_.push_back(&c);
                  },
              .on_disconnect =
                  [this](comch::connection& c) {
                    std::erase(intruders_, &c);
                    if (&c == current())
                      lost(&c, status::connection_reset,
                           fmt::format("{} closed the connection", peer_name(c)));
                  }}) {
  peer_role_ = "client";
  watch_context(server_);
  server_.start();  // throws in_use when the name is taken
}

comch_control_server::~comch_control_server() {
  stop_context();
}

comch::send_task* comch_control_server::allocate_send(comch::connection& to,
                                                      std::span<const uint8_t> bytes) noexcept {
  return server_.allocate_send(to, bytes);
}

status comch_control_server::submit(comch::send_task& task) noexcept {
  return server_.submit(task);
}

void comch_control_server::drop(comch::connection& c) noexcept {
  server_.disconnect(c);
}

void comch_control_server::after_progress() {
  // Disconnected outside the callbacks that found them; each disconnect erases its entry.
  const std::vector<comch::connection*> turned_away = std::move(intruders_);
  intruders_.clear();
  for (comch::connection* c : turned_away) server_.disconnect(*c);
}

// ---- comch_control_client ------------------------------------------------------------------

namespace {

std::chrono::milliseconds time_left(clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now());
  return std::max(left, std::chrono::milliseconds{1});
}

}  // namespace

comch_control_client::comch_control_client(std::string_view device, std::string_view name,
                                           clock::time_point deadline,
                                           const comch_channel_options& options)
    : comch_control_channel(options),
      client_(engine(),
              comch::client_config{
                  .device = std::string(device),
                  .name = std::string(name),
                  .max_msg_size = options.max_msg_size,
                  .send_tasks = options.send_tasks,
                  .on_send_done = [this](comch::send_task& t) { send_completed(t); },
                  .on_send_error = [this](comch::send_task& t) { send_completed(t); },
                  .events = {.on_message =
                                 [this](comch::connection& c, std::span<const uint8_t> m) {
                                   adopt(c);
                                   received(c, m);
                                 },
                             .on_consumer_new =
                                 [this](comch::connection& c, uint32_t id) {
                                   adopt(c);
                                   consumer(c, id, true);
                                 },
                             .on_consumer_expired =
                                 [this](comch::connection& c, uint32_t id) {
                                   adopt(c);
                                   consumer(c, id, false);
                                 }},
                  .connect_timeout = time_left(deadline)}) {
  peer_role_ = "server";
  watch_context(client_);
  const std::string& channel = client_.config().name;
  try {
    client_.start();
    for (;;) {
      (void)progress_once();
      if (client_.state() == core::context_state::running && current() != nullptr) {
        report_current();
        ZC_SDK_LOG_INFO("comch control client connected to \"{}\" ({})", channel,
                        peer_name(*current()));
        return;
      }
      if (client_.state() == core::context_state::idle) {
        switch (client_.last_error()) {
          case status::not_found:
            throw status_error(status::time_out,
                               fmt::format("Timed out connecting to comch channel \"{}\": no "
                                           "server",
                                           channel));
          case status::not_permitted:
            throw status_error(status::not_permitted,
                               fmt::format("comch channel \"{}\": the server refused us", channel));
          case status::connection_reset:
            throw status_error(status::connection_reset,
                               fmt::format("comch channel \"{}\": the server closed the connection "
                                           "at once (it serves another client)",
                                           channel));
          default:
            throw status_error(status::not_connected,
                               fmt::format("Failed to connect to comch channel \"{}\": {}", channel,
                                           status_name(client_.last_error())));
        }
      }
      if (core::stop_requested())
        throw status_error(status::shutdown,
                           fmt::format("Stopped connecting to comch channel \"{}\"", channel));
      if (clock::now() >= deadline)
        throw status_error(status::time_out,
                           fmt::format("Timed out connecting to comch channel \"{}\"", channel));
      sleep_until(deadline);
    }
  } catch (...) {
    stop_context();
    throw;
  }
}

comch_control_client::~comch_control_client() {
  stop_context();
}

void comch_control_client::adopt(comch::connection& c) {
  if (!adopted_ && current() == nullptr && c.connected()) {
    adopted_ = true;
    server_ = peer_name(c);
    connected(c);
  }
}

comch::send_task* comch_control_client::allocate_send(comch::connection&,
                                                      std::span<const uint8_t> bytes) noexcept {
  return client_.allocate_send(bytes);
}

status comch_control_client::submit(comch::send_task& task) noexcept {
  return client_.submit(task);
}

void comch_control_client::drop(comch::connection&) noexcept {
  stop_context();
}

void comch_control_client::after_progress() {
  comch::connection* live = client_.get_connection();
  if (live != nullptr) {
    adopt(*live);
    return;
  }
  if (current() != nullptr)
    lost(current(), status::connection_reset,
         fmt::format("{} closed the connection ({})", server_, status_name(client_.last_error())));
}

}  // namespace zc::storage
