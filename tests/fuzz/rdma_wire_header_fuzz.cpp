// libFuzzer harness for the rdma message header as it arrives from a peer (the active-message
// header UCX hands over, of any length). A header that decodes names a known op and was long
// enough for it; the fields past what the peer sent read as zero.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "rdma/internal/wire.hpp"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace zc::rdma::internal;
  const std::vector<uint8_t> bytes(data, data + size);
  wire_header h;
  if (!zc::ok(decode_header(bytes.data(), bytes.size(), h))) return 0;
  check(size >= header_size_for(h.code));
  check(header_size_for(h.code) <= sizeof(wire_header));
  check(h.code != op::ack_sends || (h.flags & has_ack) != 0);
  const size_t copied = std::min(size, sizeof(wire_header));
  check(std::memcmp(&h, bytes.data(), copied) == 0);
  const auto* raw = reinterpret_cast<const uint8_t*>(&h);
  for (size_t i = copied; i < sizeof(wire_header); ++i) check(raw[i] == 0);
  return 0;
}
