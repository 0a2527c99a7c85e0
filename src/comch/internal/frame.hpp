// Frames on the comch control socket (docs/FORMATS.md §6). A Unix stream socket has no message
// boundaries, so every frame starts with an 8-byte header: u32 BE payload length, u16 BE type,
// u16 BE number of file descriptors passed (SCM_RIGHTS) with the frame's first byte. Payload
// layouts are next to each type below.
//
// This is the pure half of the protocol: bytes in, a parsed frame or payload (or an error status)
// out, and the encoders that make those bytes. No I/O, no descriptors, no state: connection.cpp
// does the socket side, and tests/fuzz/comch_frame_fuzz.cpp drives these functions directly.
// Decoders are strict (every field in range, no trailing bytes), so an encoding is canonical:
// what decodes re-encodes to the same bytes.
// Thread rules: any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.hpp"

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
// Limit for every frame type but message (whose limit is the receiver's max_msg_size).
inline constexpr uint32_t max_internal_payload = 4096;
// Descriptors a consumer_new frame carries; every other type carries none.
inline constexpr uint16_t consumer_new_fds = 3;
inline constexpr uint16_t max_frame_fds = consumer_new_fds;

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

// --- the stream ------------------------------------------------------------------------------

enum class frame_outcome {
  need_more,  // no complete frame yet; the header, when there is one, is valid
  frame,      // `header` and `payload` are the first `consumed` bytes
  error,      // the header is invalid: the stream cannot be resynchronised
};

struct decoded_frame {
  frame_outcome outcome = frame_outcome::need_more;
  frame_header header;
  std::span<const uint8_t> payload;  // points into the decoded buffer
  size_t consumed = 0;
  status error = status::success;  // invalid_value (unknown type, wrong descriptor count) or
                                   // too_big (over the type's limit)
  std::string_view error_text;     // static text, for the log
};

// The first frame of `buffer`. `max_message` is the payload limit of a user message (the
// receiver's max_msg_size; 0 where none may arrive yet). The header is checked as soon as it is
// complete, before any payload is waited for: a receiver never buffers an oversized frame.
decoded_frame decode_frame(std::span<const uint8_t> buffer, uint32_t max_message) noexcept;

// --- payloads --------------------------------------------------------------------------------
// decode() fills `out` and returns success, or returns invalid_value and leaves `out` unspecified.

// hello and welcome. max_msg_size is never 0.
struct hello_payload {
  uint32_t version = 0;
  uint32_t max_msg_size = 0;
  bool operator==(const hello_payload&) const = default;
};
status decode(std::span<const uint8_t> payload, hello_payload& out) noexcept;
std::vector<uint8_t> encode(const hello_payload& p);

struct refused_payload {
  uint32_t code = 0;        // a zc::status value
  std::string_view reason;  // points into the decoded payload
  bool operator==(const refused_payload&) const = default;
};
status decode(std::span<const uint8_t> payload, refused_payload& out) noexcept;
std::vector<uint8_t> encode(const refused_payload& p);

// The id is never 0; the slot count is a power of two in [2, max_queue_slots]; the blob is not
// empty (what it says is memory_map::import_pci's to check).
struct consumer_new_payload {
  uint32_t id = 0;
  uint32_t slot_count = 0;
  std::span<const uint8_t> buffers_blob;  // points into the decoded payload
  bool operator==(const consumer_new_payload& o) const noexcept;
};
status decode(std::span<const uint8_t> payload, consumer_new_payload& out) noexcept;
std::vector<uint8_t> encode(const consumer_new_payload& p);

struct consumer_expired_payload {
  uint32_t id = 0;  // never 0
  bool operator==(const consumer_expired_payload&) const = default;
};
status decode(std::span<const uint8_t> payload, consumer_expired_payload& out) noexcept;
std::vector<uint8_t> encode(const consumer_expired_payload& p);

}  // namespace zc::comch::internal
