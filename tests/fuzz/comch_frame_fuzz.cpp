// libFuzzer harness for the comch control-socket frame decoder (comch/internal/frame.hpp): treats
// the input as a received byte stream, decodes frame after frame, decodes each payload by its
// type, and checks the round trips: a frame re-made from its header and payload is the very same
// bytes, and a payload that decodes re-encodes to the same bytes (the decoders are strict, so the
// encoding is canonical) and decodes again to the same value. Any crash, sanitizer report or
// abort is a finding.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "comch/internal/frame.hpp"

namespace {

using namespace zc::comch::internal;

void check(bool condition) {
  if (!condition) std::abort();
}

bool same(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end());
}

template <typename Payload>
void round_trip(std::span<const uint8_t> bytes) {
  Payload p;
  if (decode(bytes, p) != zc::status::success) return;
  const std::vector<uint8_t> again = encode(p);
  check(same(again, bytes));
  Payload q;
  check(decode(again, q) == zc::status::success);
  check(q == p);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> stream(data, size);
  // A small message limit as well as a large one, so that too_big is reached with small inputs;
  // 0 is what a connection still in its handshake accepts.
  const uint32_t limits[] = {0, 64, 1u << 20};
  const uint32_t max_message = limits[size % 3];
  while (!stream.empty()) {
    const decoded_frame f = decode_frame(stream, max_message);
    if (f.outcome == frame_outcome::need_more) {
      check(f.consumed == 0);
      if (stream.size() >= frame_header_size)
        check(stream.size() - frame_header_size < f.header.length);
      break;
    }
    if (f.outcome == frame_outcome::error) {
      check(f.error != zc::status::success && !f.error_text.empty() && f.consumed == 0);
      break;
    }
    check(f.consumed == frame_header_size + f.header.length && f.consumed <= stream.size());
    check(f.payload.size() == f.header.length &&
          f.payload.data() == stream.data() + frame_header_size);
    check(f.header.fds <= max_frame_fds);
    const bool user = f.header.type == static_cast<uint16_t>(frame_type::message);
    check(f.header.length <= (user ? max_message : max_internal_payload));

    const auto type = static_cast<frame_type>(f.header.type);
    const std::vector<uint8_t> remade = make_frame(type, f.payload, f.header.fds);
    check(same(remade, stream.first(f.consumed)));

    switch (type) {
      case frame_type::hello:
      case frame_type::welcome:
        round_trip<hello_payload>(f.payload);
        break;
      case frame_type::refused:
        round_trip<refused_payload>(f.payload);
        break;
      case frame_type::consumer_new: {
        round_trip<consumer_new_payload>(f.payload);
        consumer_new_payload p;
        if (decode(f.payload, p) == zc::status::success) {
          const uint32_t n = p.slot_count;
          check(p.id != 0 && n >= 2 && (n & (n - 1)) == 0 && !p.buffers_blob.empty());
          check(p.buffers_blob.data() >= f.payload.data() &&
                p.buffers_blob.data() + p.buffers_blob.size() ==
                    f.payload.data() + f.payload.size());
        }
        break;
      }
      case frame_type::consumer_expired:
        round_trip<consumer_expired_payload>(f.payload);
        break;
      case frame_type::message:
        break;
    }
    stream = stream.subspan(f.consumed);
  }
  return 0;
}
