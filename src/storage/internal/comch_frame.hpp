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
#include "storage/comch_control_channel.hpp"
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

// The largest frame body a channel with `options` sends or accepts (its max_body_size, bounded by
// one comch message). Throws status_error(bad_config) for options no channel can work with (no
// queued send, a message size that cannot hold a frame).
size_t checked_max_body_size(const comch_channel_options& options);

// Arms the timerfd `timer` (absolute, CLOCK_MONOTONIC) for ctx's next deadline, or now when ctx
// has buffered work; disarms it when ctx has none.
void arm_deadline_timer(int timer, core::context& ctx) noexcept;

// Adds `fd` to `epoll` for reading. Throws status_error(operating_system).
void watch_readable(int epoll, int fd);

}  // namespace zc::storage::internal
