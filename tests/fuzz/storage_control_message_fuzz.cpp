// libFuzzer harness for the control-message frame decoder: treats the input as a received byte
// stream, decodes frame after frame, and checks that what decodes re-encodes to the very same
// bytes (the decoder is strict, so the encoding is canonical) and decodes again to the same
// message. Any crash, sanitizer report or abort is a finding.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "storage/control_message.hpp"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zc::storage;
  std::span<const uint8_t> stream(data, size);
  // A small maximum as well as the default, so the too_big path is reached with small inputs.
  const size_t max_body = size % 2 ? default_max_body_size : 64;
  while (!stream.empty()) {
    const decode_result r = decode_frame(stream, max_body);
    if (r.outcome == decode_outcome::need_more) {
      check(r.consumed == 0);
      break;
    }
    if (r.outcome == decode_outcome::error) {
      check(r.error != zc::status::success && !r.error_text.empty() && r.consumed == 0);
      break;
    }
    check(r.consumed >= frame_header_size + message_header_size && r.consumed <= stream.size());
    check(payload_matches(r.msg.type, r.msg.payload));

    const std::vector<uint8_t> again = encode(r.msg);
    check(again.size() == r.consumed);
    check(std::equal(again.begin(), again.end(), stream.begin()));

    const decode_result round = decode_frame(again, max_body);
    check(round.outcome == decode_outcome::message && round.consumed == again.size());
    check(round.msg == r.msg);

    stream = stream.subspan(r.consumed);
  }
  return 0;
}
