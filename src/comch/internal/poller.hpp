// The event loop a server or client runs inside its poll(): one epoll set holding its listening
// socket (server), its connections' sockets and the mailbox doorbell that fast-path endpoints ring
// when they post frames. The epoll fd is the owner's wait_fd, so a sleeping progress engine wakes
// for any of them.
// Thread rules: the owner's thread only.
#pragma once

#include <sys/epoll.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "comch/connection.hpp"

namespace zc::comch::internal {

class poller {
 public:
  poller();
  ~poller();
  poller(const poller&) = delete;
  poller& operator=(const poller&) = delete;

  int fd() const noexcept { return epoll_; }
  int mailbox() const noexcept { return mailbox_; }

  void watch_listener(int fd);
  // Stops (or starts again) watching the listener for peers; it stays in the set.
  void pause_listener(int fd, bool paused) noexcept;
  // Removes it from the set, then closes it (see connection::close_socket for why in that order).
  void close_listener(int fd) noexcept;
  void watch(connection& c);
  // Adds or drops EPOLLOUT to match what the connection has queued.
  void update(connection& c) noexcept;

  // One non-blocking round over ready sockets: connections read and write, the mailbox drains
  // every connection's outbox, and `accept` runs when the listener is ready. Then connections
  // with buffered frames are served, broken or timed-out handshakes closed, and closed
  // connections moved out of `live` into `dead`. Returns the work done.
  template <typename Accept>
  size_t run(std::vector<std::unique_ptr<connection>>& live,
             std::vector<std::unique_ptr<connection>>& dead, Accept&& accept);

  // A connection still in its hello/welcome exchange has this deadline; max() if none.
  static std::chrono::steady_clock::time_point next_deadline(
      const std::vector<std::unique_ptr<connection>>& live) noexcept;
  static bool has_backlog(const std::vector<std::unique_ptr<connection>>& live) noexcept;

 private:
  size_t serve(connection& c, uint32_t events);
  void drain_mailbox() noexcept;
  size_t sweep(std::vector<std::unique_ptr<connection>>& live,
               std::vector<std::unique_ptr<connection>>& dead);

  int epoll_ = -1;
  int mailbox_ = -1;
  int listener_ = -1;
  uint64_t round_ = 0;  // a connection reads once per round: recv_queue_size holds per poll()
};

template <typename Accept>
size_t poller::run(std::vector<std::unique_ptr<connection>>& live,
                   std::vector<std::unique_ptr<connection>>& dead, Accept&& accept) {
  size_t work = 0;
  ++round_;
  epoll_event events[32];
  int n = epoll_wait(epoll_, events, 32, 0);
  for (int i = 0; i < n; ++i) {
    void* tag = events[i].data.ptr;
    if (tag == &listener_) {
      work += accept();
    } else if (tag == &mailbox_) {
      drain_mailbox();
      for (auto& c : live) {
        c->drain_outbox();
        update(*c);
      }
      ++work;
    } else {
      // Connections closed earlier in this round are still alive (in `live` or `dead`).
      work += serve(*static_cast<connection*>(tag), events[i].events);
    }
  }
  return work + sweep(live, dead);
}

}  // namespace zc::comch::internal
