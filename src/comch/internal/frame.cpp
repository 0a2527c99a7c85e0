#include "comch/internal/frame.hpp"

#include <algorithm>

#include "comch/internal/queue.hpp"
#include "core/bytes.hpp"

namespace zc::comch::internal {
namespace {

// Descriptors a frame of `type` must declare, or -1 for a type we do not know.
int fds_of(uint16_t type) noexcept {
  switch (static_cast<frame_type>(type)) {
    case frame_type::hello:
    case frame_type::welcome:
    case frame_type::refused:
    case frame_type::message:
    case frame_type::consumer_expired:
      return 0;
    case frame_type::consumer_new:
      return consumer_new_fds;
  }
  return -1;
}

decoded_frame failed(status why, std::string_view text) noexcept {
  decoded_frame f;
  f.outcome = frame_outcome::error;
  f.error = why;
  f.error_text = text;
  return f;
}

}  // namespace

void encode_header(uint8_t* out, const frame_header& h) noexcept {
  store_be32(out, h.length);
  store_be16(out + 4, h.type);
  store_be16(out + 6, h.fds);
}

frame_header decode_header(const uint8_t* in) noexcept {
  return frame_header{load_be32(in), load_be16(in + 4), load_be16(in + 6)};
}

std::vector<uint8_t> make_frame(frame_type type, std::span<const uint8_t> payload, uint16_t fds) {
  std::vector<uint8_t> out(frame_header_size + payload.size());
  encode_header(out.data(),
                {static_cast<uint32_t>(payload.size()), static_cast<uint16_t>(type), fds});
  if (!payload.empty()) std::copy(payload.begin(), payload.end(), out.begin() + frame_header_size);
  return out;
}

decoded_frame decode_frame(std::span<const uint8_t> buffer, uint32_t max_message) noexcept {
  decoded_frame f;
  if (buffer.size() < frame_header_size) return f;
  f.header = decode_header(buffer.data());
  const int fds = fds_of(f.header.type);
  if (fds < 0) return failed(status::invalid_value, "unknown frame type");
  if (f.header.fds != fds) return failed(status::invalid_value, "wrong descriptor count");
  const uint32_t limit = f.header.type == static_cast<uint16_t>(frame_type::message)
                             ? max_message
                             : max_internal_payload;
  if (f.header.length > limit) return failed(status::too_big, "frame over its size limit");
  if (buffer.size() - frame_header_size < f.header.length) return f;
  f.outcome = frame_outcome::frame;
  f.payload = buffer.subspan(frame_header_size, f.header.length);
  f.consumed = frame_header_size + f.header.length;
  return f;
}

status decode(std::span<const uint8_t> payload, hello_payload& out) noexcept {
  byte_reader r(payload);
  out.version = r.u32();
  out.max_msg_size = r.u32();
  return r.ok() && r.remaining() == 0 && out.max_msg_size != 0 ? status::success
                                                               : status::invalid_value;
}

std::vector<uint8_t> encode(const hello_payload& p) {
  std::vector<uint8_t> out;
  byte_writer w(out);
  w.u32(p.version);
  w.u32(p.max_msg_size);
  return out;
}

status decode(std::span<const uint8_t> payload, refused_payload& out) noexcept {
  byte_reader r(payload);
  out.code = r.u32();
  auto reason = r.sized_bytes();
  out.reason = {reinterpret_cast<const char*>(reason.data()), reason.size()};
  return r.ok() && r.remaining() == 0 ? status::success : status::invalid_value;
}

std::vector<uint8_t> encode(const refused_payload& p) {
  std::vector<uint8_t> out;
  byte_writer w(out);
  w.u32(p.code);
  w.sized_string(p.reason);
  return out;
}

bool consumer_new_payload::operator==(const consumer_new_payload& o) const noexcept {
  return id == o.id && slot_count == o.slot_count &&
         std::equal(buffers_blob.begin(), buffers_blob.end(), o.buffers_blob.begin(),
                    o.buffers_blob.end());
}

status decode(std::span<const uint8_t> payload, consumer_new_payload& out) noexcept {
  byte_reader r(payload);
  out.id = r.u32();
  out.slot_count = r.u32();
  out.buffers_blob = r.sized_bytes();
  const uint32_t n = out.slot_count;
  const bool slots_ok = valid_slot_count(n);
  return r.ok() && r.remaining() == 0 && out.id != 0 && slots_ok && !out.buffers_blob.empty()
             ? status::success
             : status::invalid_value;
}

std::vector<uint8_t> encode(const consumer_new_payload& p) {
  std::vector<uint8_t> out;
  byte_writer w(out);
  w.u32(p.id);
  w.u32(p.slot_count);
  w.sized_bytes(p.buffers_blob);
  return out;
}

status decode(std::span<const uint8_t> payload, consumer_expired_payload& out) noexcept {
  byte_reader r(payload);
  out.id = r.u32();
  return r.ok() && r.remaining() == 0 && out.id != 0 ? status::success : status::invalid_value;
}

std::vector<uint8_t> encode(const consumer_expired_payload& p) {
  std::vector<uint8_t> out;
  byte_writer w(out);
  w.u32(p.id);
  return out;
}

}  // namespace zc::comch::internal
