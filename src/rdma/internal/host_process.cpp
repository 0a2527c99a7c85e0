#include "rdma/internal/host_process.hpp"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434  // the same number on every architecture
#endif

namespace zc::rdma::internal {
namespace {

// start_time_from's answer when /proc could not be read for a reason other than "no such process"
// (out of fds, say): the process may well be alive.
constexpr uint64_t unknown_start = ~uint64_t{0};

// Reads a small /proc file into buf (NUL-terminated); the length read. 0 on failure, errno telling
// why: ENOENT or ESRCH when the process is gone (an empty file counts as gone).
size_t read_small_file(const char* path, char* buf, size_t size) noexcept {
  buf[0] = '\0';
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t len = 0;
  int error = ESRCH;
  while (len + 1 < size) {
    ssize_t n = ::read(fd, buf + len, size - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    len += static_cast<size_t>(n);
  }
  ::close(fd);
  buf[len] = '\0';
  if (len == 0) errno = error;
  return len;
}

// Start time (field 22) from a /proc/<pid>/stat file; 0 if the process does not exist or is no
// longer running (a zombie has stopped running: its memory and endpoints are gone even though its
// /proc entry stays until it is reaped); unknown_start if the file could not be read otherwise.
uint64_t start_time_from(const char* stat_path) noexcept {
  char stat[2048];
  size_t len = read_small_file(stat_path, stat, sizeof stat);
  if (len == 0) return errno == ENOENT || errno == ESRCH ? 0 : unknown_start;
  // The command name (field 2) may contain spaces and parentheses: count fields after the last ')'.
  const char* p = nullptr;
  for (size_t i = len; i > 0; --i) {
    if (stat[i - 1] == ')') {
      p = stat + i;
      break;
    }
  }
  if (p == nullptr) return 0;
  for (int field = 3; field <= 22; ++field) {
    while (*p == ' ') ++p;
    if (*p == '\0') return 0;
    if (field == 3 && (*p == 'Z' || *p == 'X' || *p == 'x')) return 0;
    if (field == 22) {
      uint64_t v = 0;
      for (; *p >= '0' && *p <= '9'; ++p) v = v * 10 + static_cast<uint64_t>(*p - '0');
      return v;
    }
    while (*p != ' ' && *p != '\0') ++p;
  }
  return 0;
}

uint64_t start_time_of(uint32_t pid) noexcept {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%u/stat", pid);
  return start_time_from(path);
}

uint64_t boot_hash() noexcept {
  char id[128];
  size_t len = read_small_file("/proc/sys/kernel/random/boot_id", id, sizeof id);
  while (len > 0 && (id[len - 1] == '\n' || id[len - 1] == ' ')) --len;
  if (len == 0) return 0;
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a: the same value in every build
  for (size_t i = 0; i < len; ++i) {
    h ^= static_cast<uint8_t>(id[i]);
    h *= 0x100000001b3ULL;
  }
  return h | 1;  // never 0: 0 means "unknown host"
}

uint64_t pid_namespace() noexcept {
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) != 0) return 0;
  return (static_cast<uint64_t>(st.st_dev) << 32) ^ static_cast<uint64_t>(st.st_ino);
}

}  // namespace

host_process host_process::self() {
  host_process p;
  p.host_id = boot_hash();
  p.pid_ns = pid_namespace();
  p.pid = static_cast<uint32_t>(getpid());
  // /proc/self, not /proc/<getpid()>: /proc may be mounted from another pid namespace.
  p.start_time = start_time_from("/proc/self/stat");
  if (p.start_time == unknown_start) p.start_time = 0;
  return p;
}

void host_process::write(byte_writer& w) const {
  w.u64(host_id);
  w.u64(pid_ns);
  w.u32(pid);
  w.u64(start_time);
}

bool host_process::read(byte_reader& r, host_process& out) {
  host_process p;
  p.host_id = r.u64();
  p.pid_ns = r.u64();
  p.pid = r.u32();
  p.start_time = r.u64();
  if (!r.ok() || p.host_id == 0 || p.pid == 0) return false;
  out = p;
  return true;
}

bool host_process::can_watch(const host_process& other) const noexcept {
  return host_id != 0 && other.host_id == host_id && pid_ns != 0 && other.pid_ns == pid_ns &&
         other.pid != 0 && other.pid != pid && other.start_time != 0;
}

process_watch::~process_watch() {
  close();
}

process_watch::process_watch(process_watch&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      watching_(std::exchange(other.watching_, false)),
      pid_(std::exchange(other.pid_, 0)),
      start_time_(std::exchange(other.start_time_, 0)) {}

process_watch& process_watch::operator=(process_watch&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    watching_ = std::exchange(other.watching_, false);
    pid_ = std::exchange(other.pid_, 0);
    start_time_ = std::exchange(other.start_time_, 0);
  }
  return *this;
}

bool process_watch::open(const host_process& p) noexcept {
  close();
  if (!host_process::self().can_watch(p)) return false;
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(p.pid), 0u));
  if (fd < 0) {
    // ESRCH: no such process. EINVAL: not a thread-group leader, so not a peer's getpid().
    // Anything else (ENOSYS, EPERM from seccomp, EMFILE, ENOMEM...): watch through /proc.
    if (errno == ESRCH || errno == EINVAL) return false;
  }
  // The pidfd now pins whichever process had the pid; make sure it is the one described. (If the
  // pid was recycled before pidfd_open, /proc shows the newer process's later start time; if the
  // described process exits after it, /proc shows no start time or a later one.)
  if (start_time_of(p.pid) != p.start_time) {
    if (fd >= 0) ::close(fd);
    return false;
  }
  fd_ = fd;
  watching_ = true;
  pid_ = p.pid;
  start_time_ = p.start_time;
  return true;
}

bool process_watch::exited() const noexcept {
  if (!watching_) return false;
  if (fd_ < 0) {
    uint64_t now = start_time_of(pid_);
    return now != unknown_start && now != start_time_;
  }
  pollfd pfd{fd_, POLLIN, 0};
  int n;
  do {
    n = ::poll(&pfd, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n > 0 && (pfd.revents & (POLLIN | POLLHUP)) != 0;
}

void process_watch::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  watching_ = false;
  pid_ = 0;
  start_time_ = 0;
}

}  // namespace zc::rdma::internal
