// Identity of a process on this host, carried in connection blobs so that a same-host peer's death
// is noticed by the kernel, whatever UCX's shared-memory keepalive does (UCX 1.13 does not report
// a dead shared-memory peer to an event-driven worker; see UCX_MEASURED.md §7 and the rdma tests).
//
// A pid names a process only inside one pid namespace: two containers share the boot id but not
// their pids. So a peer is watched only when it has the same boot id AND the same pid namespace,
// and the watch is a pidfd (pollable, readable once the process has exited), opened only after
// checking that the pid still belongs to the process the blob describes (its start time).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "core/bytes.hpp"

namespace zc::rdma::internal {

struct host_process {
  // Wire form (write/read): u64 host_id, u64 pid_ns, u32 pid, u64 start_time, big-endian.
  static constexpr size_t wire_size = 28;

  // Hash (FNV-1a, never 0) of /proc/sys/kernel/random/boot_id: same host, same boot. 0: unknown.
  uint64_t host_id = 0;
  // The pid namespace, from stat() of /proc/self/ns/pid: (st_dev << 32) ^ st_ino. Namespace
  // inode numbers are 32-bit proc inums, so this is exact; st_dev tells nsfs instances apart.
  // 0: unknown (never watchable).
  uint64_t pid_ns = 0;
  uint32_t pid = 0;  // in that pid namespace
  // Clock ticks after boot (/proc/<pid>/stat field 22). 0: unknown (never watchable).
  uint64_t start_time = 0;

  // This process, read afresh on each call (not cached, so a forked child describes itself).
  static host_process self();

  void write(byte_writer& w) const;
  // False (and `out` untouched) on short input, or on pid 0 or host_id 0 (no process has them).
  // Reads exactly wire_size bytes; what follows is the caller's.
  static bool read(byte_reader& r, host_process& out);

  // True when `other` is a different process on this host that this process can watch: same
  // host_id AND same pid namespace AND different pid, with none of those (nor other's start time,
  // needed to tell a recycled pid) unknown.
  bool can_watch(const host_process& other) const noexcept;
};

// Watches one process through a pidfd (pidfd_open(2), Linux >= 5.3).
//
// open() verifies, after pidfd_open, that the pid still has the expected start time, so a recycled
// pid is not watched. exited() is a non-blocking check. fd() is pollable by poll/epoll and becomes
// readable once the process has exited (a zombie counts as exited: its memory and endpoints are
// gone), so an event-mode progress engine can sleep on it.
//
// Fallback: where pidfd_open is unavailable (ENOSYS on an old kernel, or EPERM from a seccomp
// filter that does not know it, or no fd left), open() still succeeds after the same start-time
// check, but then fd() is -1 while watching() is true: the caller must call exited() on a timer
// (it compares /proc/<pid>/stat's start time, as the pre-pidfd code did every 250 ms).
class process_watch {
 public:
  process_watch() = default;
  ~process_watch();
  process_watch(process_watch&& other) noexcept;
  process_watch& operator=(process_watch&& other) noexcept;
  process_watch(const process_watch&) = delete;
  process_watch& operator=(const process_watch&) = delete;

  // Starts watching `p` (dropping any previous watch). False, and no watch, when `p` cannot be
  // watched from here (host_process::self().can_watch(p) is false) or is already gone (exited,
  // zombie, or its pid now belongs to another process): the caller then relies on UCX keepalive.
  bool open(const host_process& p) noexcept;
  bool watching() const noexcept { return watching_; }
  // True once the watched process has exited. Never blocks; false when not watching.
  bool exited() const noexcept;
  // The pidfd (readable once the process has exited); -1 when not watching or in the /proc
  // fallback (see above).
  int fd() const noexcept { return fd_; }
  uint32_t pid() const noexcept { return pid_; }
  void close() noexcept;

 private:
  int fd_ = -1;
  bool watching_ = false;
  uint32_t pid_ = 0;  // for the /proc fallback
  uint64_t start_time_ = 0;
};

}  // namespace zc::rdma::internal
