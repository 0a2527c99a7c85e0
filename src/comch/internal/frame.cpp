#include "comch/internal/frame.hpp"

#include "core/bytes.hpp"

namespace zc::comch::internal {

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

}  // namespace zc::comch::internal
