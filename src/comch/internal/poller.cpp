#include "comch/internal/poller.hpp"

#include <unistd.h>

#include <algorithm>

#include "comch/internal/unix_socket.hpp"
#include "core/log.hpp"

namespace zc::comch::internal {
namespace {
constexpr uint32_t read_events = EPOLLIN | EPOLLRDHUP;
}

poller::poller() {
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  mailbox_ = make_doorbell();
  if (epoll_ < 0 || mailbox_ < 0) {
    close_fd(epoll_);
    close_fd(mailbox_);
    throw status_error(status::operating_system, "comch: cannot create epoll set or eventfd");
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &mailbox_;
  epoll_ctl(epoll_, EPOLL_CTL_ADD, mailbox_, &ev);
}

poller::~poller() {
  close_fd(epoll_);
  close_fd(mailbox_);
}

void poller::watch_listener(int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &listener_;
  if (epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw status_error(status::operating_system, "comch: cannot watch the listening socket");
}

void poller::pause_listener(int fd, bool paused) noexcept {
  if (fd < 0) return;
  epoll_event ev{};
  ev.events = paused ? 0u : static_cast<uint32_t>(EPOLLIN);
  ev.data.ptr = &listener_;
  (void)epoll_ctl(epoll_, EPOLL_CTL_MOD, fd, &ev);
}

void poller::close_listener(int fd) noexcept {
  if (fd < 0) return;
  epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
  close_fd(fd);
}

void poller::watch(connection& c) {
  epoll_event ev{};
  ev.events = read_events;
  ev.data.ptr = &c;
  if (epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd(), &ev) != 0)
    throw status_error(status::operating_system, "comch: cannot watch a connection");
  c.poll_set_ = epoll_;
  c.write_armed_ = false;
}

void poller::update(connection& c) noexcept {
  if (c.fd() < 0 || c.wants_write() == c.write_armed_) return;
  epoll_event ev{};
  ev.events = read_events | (c.wants_write() ? EPOLLOUT : 0u);
  ev.data.ptr = &c;
  if (epoll_ctl(epoll_, EPOLL_CTL_MOD, c.fd(), &ev) == 0) c.write_armed_ = c.wants_write();
}

void poller::drain_mailbox() noexcept {
  drain(mailbox_);
}

size_t poller::serve(connection& c, uint32_t events) {
  if (c.closed()) return 0;
  size_t work = 0;
  if ((events & EPOLLOUT) != 0) work += c.flush() + 1;
  if ((events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    c.served_round_ = round_;
    work += c.receive() + 1;
  }
  update(c);
  return work;
}

size_t poller::sweep(std::vector<std::unique_ptr<connection>>& live,
                     std::vector<std::unique_ptr<connection>>& dead) {
  size_t work = 0;
  std::chrono::steady_clock::time_point now{};
  for (size_t i = 0; i < live.size(); ++i) {
    connection& c = *live[i];
    if (c.broken()) {
      c.close(status::connection_reset);
      ++work;
    } else if (c.has_backlog()) {
      if (c.served_round_ == round_) continue;
      c.served_round_ = round_;
      work += c.receive();
      update(c);
    } else if (c.phase_ == connection::phase::handshake) {
      if (now == std::chrono::steady_clock::time_point{}) now = std::chrono::steady_clock::now();
      if (now >= c.handshake_deadline_) {
        ZC_SDK_LOG_WARN("comch: peer pid {} did not complete the handshake in {} ms; dropped",
                        c.peer_pid(), handshake_timeout.count());
        c.close(status::time_out);
        ++work;
      }
    }
  }
  auto closed =
      std::stable_partition(live.begin(), live.end(), [](const auto& c) { return !c->closed(); });
  for (auto it = closed; it != live.end(); ++it) dead.push_back(std::move(*it));
  live.erase(closed, live.end());
  return work;
}

std::chrono::steady_clock::time_point poller::next_deadline(
    const std::vector<std::unique_ptr<connection>>& live) noexcept {
  auto deadline = std::chrono::steady_clock::time_point::max();
  for (const auto& c : live)
    if (c->phase_ == connection::phase::handshake)
      deadline = std::min(deadline, c->handshake_deadline_);
  return deadline;
}

bool poller::has_backlog(const std::vector<std::unique_ptr<connection>>& live) noexcept {
  return std::any_of(live.begin(), live.end(),
                     [](const auto& c) { return c->has_backlog() || c->broken(); });
}

}  // namespace zc::comch::internal
