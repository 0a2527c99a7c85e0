// UCX status codes as zc::status, and small buffer helpers the rdma sources share.
#pragma once

#include <ucp/api/ucp.h>

#include "core/buffer.hpp"
#include "core/status.hpp"

namespace zc::rdma::internal {

inline status from_ucs(int s) noexcept {
  switch (static_cast<ucs_status_t>(s)) {
    case UCS_OK:
      return status::success;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
      return status::connection_reset;
    case UCS_ERR_CANCELED:
      return status::shutdown;
    case UCS_ERR_NO_MEMORY:
      return status::no_memory;
    case UCS_ERR_NO_RESOURCE:
      return status::again;
    default:
      return status::io_failed;
  }
}

// Space left after a buffer's data section, and where it starts: received, read and written
// bytes are appended there (DOCA's semantics).
inline size_t tail_room(const core::buffer& b) noexcept {
  return b.capacity() - static_cast<size_t>(b.data() - b.head()) - b.data_length();
}
inline uint8_t* tail(const core::buffer& b) noexcept {
  return b.data() + b.data_length();
}
inline void grow(core::buffer& b, size_t length) noexcept {
  b.set_data(b.data(), b.data_length() + length);
}

}  // namespace zc::rdma::internal
