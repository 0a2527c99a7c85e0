#include "rdma/internal/wire.hpp"

#include <algorithm>
#include <cstring>

namespace zc::rdma::internal {

status decode_header(const void* bytes, size_t length, wire_header& out) noexcept {
  out = {};
  if (bytes == nullptr || length < short_header_size) return status::invalid_value;
  std::memcpy(&out, bytes, std::min(length, sizeof(out)));
  switch (out.code) {
    case op::send:
    case op::write:
    case op::read:
    case op::read_reply:
    case op::atomic:
    case op::ack_sends:
    case op::nack_send:
    case op::ack_op:
    case op::disconnect:
      break;
    default:
      return status::invalid_value;
  }
  // Bytes past what the peer sent stay zero; a header shorter than its op needs is refused.
  if (length < header_size_for(out.code)) return status::invalid_value;
  // An acknowledgement alone that acknowledges nothing is not one.
  if (out.code == op::ack_sends && (out.flags & has_ack) == 0) return status::invalid_value;
  return status::success;
}

}  // namespace zc::rdma::internal
