#include "storage/control_channel.hpp"

#include <poll.h>

#include "core/thread.hpp"

namespace zc::storage {
namespace {

using clock = std::chrono::steady_clock;

// Sleeps until the channel's descriptor or the stop descriptor is readable, or until `deadline`.
void sleep_on(const control_channel& channel, clock::time_point deadline, bool watch_stop = true) {
  const auto left = deadline - clock::now();
  if (left <= clock::duration::zero()) return;
  // Round up: a sub-millisecond remainder rounded down to 0 would turn the last wait into a spin.
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  pollfd fds[2] = {{channel.wait_fd(), POLLIN, 0}, {core::stop_signal_fd(), POLLIN, 0}};
  const nfds_t count = watch_stop && fds[1].fd >= 0 ? 2 : 1;
  const int timeout = ms > 60'000 ? 60'000 : static_cast<int>(ms);
  // EINTR just means we look again sooner.
  (void)::poll(fds, count, timeout);
}

receive_result stopped() {
  return {std::nullopt, status::shutdown, "stop requested"};
}

}  // namespace

receive_result wait_for(control_channel& channel, std::chrono::milliseconds timeout,
                        on_stop_request policy) {
  const auto deadline = clock::now() + timeout;
  const bool give_up = policy == on_stop_request::give_up;
  for (;;) {
    receive_result r = channel.poll();
    if (r.msg || r.failed()) return r;
    if (give_up && core::stop_requested()) return stopped();
    if (clock::now() >= deadline)
      return {std::nullopt, status::time_out,
              channel.is_connected() ? "timed out waiting for a control message"
                                     : "timed out waiting for a control message (not connected)"};
    sleep_on(channel, deadline, give_up);
  }
}

status wait_until_connected(control_channel& channel, std::chrono::milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  for (;;) {
    if (channel.is_connected()) return status::success;
    // By contract the poll() that connects returns no message, so discarding it loses nothing.
    (void)channel.poll();
    if (channel.is_connected()) return status::success;
    if (core::stop_requested()) return status::shutdown;
    if (clock::now() >= deadline) return status::time_out;
    sleep_on(channel, deadline);
  }
}

}  // namespace zc::storage
