// Frames on the comch control socket. A Unix stream socket has no message boundaries, so every
// frame starts with an 8-byte header: u32 BE payload length, u16 BE type, u16 BE number of file
// descriptors passed (SCM_RIGHTS) with the frame's first byte. Receivers check the length against
// their limit for the type before buffering anything: a frame over the limit is a protocol error
// and the connection is dropped. Payload layouts are next to each type below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace zc::comch::internal {

enum class frame_type : uint16_t {
  hello = 1,             // client -> server: u32 version, u32 max_msg_size
  welcome = 2,           // server -> client: u32 version, u32 max_msg_size
  refused = 3,           // server -> client: u32 status, sized reason text; then close
  message = 4,           // a user control message, payload as sent
  consumer_new = 5,      // u32 id, u32 slot count, sized buffer-memory PCI export blob;
                         // fds: queue memfd, data doorbell, space doorbell
  consumer_expired = 6,  // u32 id
};

inline constexpr size_t frame_header_size = 8;
inline constexpr uint32_t protocol_version = 1;
// Limit for every frame type but message (whose limit is the configured max_msg_size).
inline constexpr uint32_t max_internal_payload = 4096;
inline constexpr uint16_t max_frame_fds = 3;

struct frame_header {
  uint32_t length = 0;
  uint16_t type = 0;
  uint16_t fds = 0;
};

void encode_header(uint8_t* out, const frame_header& h) noexcept;
frame_header decode_header(const uint8_t* in) noexcept;
// Header + payload in one vector (internal frames; user messages are sent from the caller's
// memory with a separate header).
std::vector<uint8_t> make_frame(frame_type type, std::span<const uint8_t> payload, uint16_t fds);

}  // namespace zc::comch::internal
