// UCX status codes as zc::status.
#pragma once

#include <ucp/api/ucp.h>

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

}  // namespace zc::rdma::internal
