// libFuzzer harness for the rdma message header as it arrives from a peer (the active-message
// header UCX hands over, of any length). A header decodes exactly when it names an op FORMATS §8
// lists and is at least as long as that op's length in the document's table; the fields past
// what the peer sent read as zero.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rdma/internal/wire.hpp"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

// docs/FORMATS.md §8, "Header length by op": written out from the document, not taken from
// header_size_for(), so a change of the code that the document does not follow is caught.
size_t documented_length(zc::rdma::internal::op code) {
  using zc::rdma::internal::op;
  switch (code) {
    case op::send:
    case op::ack_sends:
    case op::disconnect:
      return 28;
    case op::nack_send:
      return 32;
    case op::read_reply:
      return 40;
    case op::ack_op:
      return 80;
    case op::write:
    case op::read:
    case op::atomic:
      return 88;
  }
  return 0;  // not an op the document lists
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zc::rdma::internal;
  const std::vector<uint8_t> bytes(data, data + size);
  wire_header h;
  if (!zc::ok(decode_header(bytes.data(), bytes.size(), h))) {
    // Refused: unless too short for the document's length of the op it names, or an ack_sends
    // without has_ack, the op is not one the document lists.
    if (size >= 14) {
      op code;
      uint16_t flags = 0;
      std::memcpy(&code, bytes.data() + 12, sizeof(code));
      if (size >= 16) std::memcpy(&flags, bytes.data() + 14, sizeof(flags));
      const size_t need = documented_length(code);
      check(need == 0 || size < need || (code == op::ack_sends && (flags & has_ack) == 0));
    }
    return 0;
  }
  check(documented_length(h.code) != 0);
  check(size >= documented_length(h.code));
  check(header_size_for(h.code) == documented_length(h.code));
  check(h.code != op::ack_sends || (h.flags & has_ack) != 0);
  const size_t copied = std::min(size, sizeof(wire_header));
  check(std::memcmp(&h, bytes.data(), copied) == 0);
  const auto* raw = reinterpret_cast<const uint8_t*>(&h);
  for (size_t i = copied; i < sizeof(wire_header); ++i) check(raw[i] == 0);
  return 0;
}
