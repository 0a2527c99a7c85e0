// What the comch control channels share (comch_control_channel, comch_session_server): one
// control frame carried whole by one comch message (FORMATS.md §6), the timer that wakes a comch
// context's owner for its deadlines, and watching a descriptor in an epoll set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "core/context.hpp"
#include "storage/control_message.hpp"

namespace zc::storage::internal {

// The message one comch message holds, or what is wrong with it (code, and a text such as "2
// bytes after the frame in one comch message").
struct comch_frame {
  std::optional<message> msg;
  status code = status::success;
  std::string why;
};
comch_frame decode_comch_message(std::span<const uint8_t> bytes, size_t max_body_size);

// Arms the timerfd `timer` (absolute, CLOCK_MONOTONIC) for ctx's next deadline, or now when ctx
// has buffered work; disarms it when ctx has none.
void arm_deadline_timer(int timer, core::context& ctx) noexcept;

// Adds `fd` to `epoll` for reading. Throws status_error(operating_system).
void watch_readable(int epoll, int fd);

}  // namespace zc::storage::internal
