// Identity of a process on this host (boot id, pid, start time), carried in connection blobs so
// a same-host peer's death is noticed by looking at /proc, whatever UCX's shared-memory keepalive
// does (UCX 1.13 does not report it to an event-driven worker; see the rdma tests).
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace zc::rdma::internal {

struct host_process {
  uint64_t host_id = 0;  // hash of the kernel boot id: same host, same boot
  uint32_t pid = 0;
  uint64_t start_time = 0;  // clock ticks after boot (/proc/<pid>/stat field 22)

  static host_process self();
  // False once the process is gone or its pid now belongs to another process.
  bool alive() const;
};

}  // namespace zc::rdma::internal
