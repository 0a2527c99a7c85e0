#include "storage/internal/comch_frame.hpp"

#include <sys/epoll.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <fmt/format.h>

#include "storage/internal/fd_io.hpp"

namespace zc::storage::internal {

comch_frame decode_comch_message(std::span<const uint8_t> bytes, size_t max_body_size) {
  decode_result r = decode_frame(bytes, max_body_size);
  if (r.outcome == decode_outcome::message && r.consumed == bytes.size())
    return {std::move(r.msg), status::success, {}};
  if (r.outcome == decode_outcome::error) return {std::nullopt, r.error, std::move(r.error_text)};
  if (r.outcome == decode_outcome::need_more)
    return {std::nullopt, status::invalid_value,
            fmt::format("comch message of {} bytes holds a truncated frame", bytes.size())};
  return {std::nullopt, status::invalid_value,
          fmt::format("{} bytes after the frame in one comch message", bytes.size() - r.consumed)};
}

size_t checked_max_body_size(const comch_channel_options& options) {
  if (options.max_queued_sends == 0)
    throw status_error(status::bad_config, "a comch control channel needs max_queued_sends >= 1");
  if (options.max_msg_size < frame_header_size + message_header_size)
    throw status_error(
        status::bad_config,
        fmt::format("comch max message size {} cannot hold a control frame", options.max_msg_size));
  return std::min(options.max_body_size,
                  static_cast<size_t>(options.max_msg_size) - frame_header_size);
}

void arm_deadline_timer(int timer, core::context& ctx) noexcept {
  using clock = std::chrono::steady_clock;
  const clock::time_point when = ctx.arm() ? ctx.next_deadline() : clock::now();
  itimerspec spec{};
  if (when != clock::time_point::max()) {
    // steady_clock is CLOCK_MONOTONIC; 0 would disarm, so a past deadline becomes 1 ns.
    const auto ns = std::max<int64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count(), 1);
    spec.it_value.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  }
  (void)::timerfd_settime(timer, TFD_TIMER_ABSTIME, &spec, nullptr);
}

void watch_readable(int epoll, int fd) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev) != 0)
    throw status_error(status::operating_system,
                       fmt::format("Failed to watch a descriptor: {}", error_text(errno)));
}

}  // namespace zc::storage::internal
