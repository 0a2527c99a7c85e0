// What tests that fork a child share: a bounded wait for the child, and bounded, whole-message
// IO over the pipes between them (length-prefixed blobs). Every wait has a bound, so a child that
// hangs or dies is a red test, never a hang.
#pragma once

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <thread>
#include <vector>

namespace zc::test {

// Waits for a child; kills it if it outlives `bound`. Returns its wait status, or nullopt when
// it had to be killed.
inline std::optional<int> reap(pid_t pid, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return st;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

inline bool readable_within(int fd, std::chrono::milliseconds bound) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, static_cast<int>(bound.count())) == 1;
}

// Reads exactly n bytes, each read bounded; false on timeout or end of file.
inline bool read_exactly(int fd, void* out, size_t n, std::chrono::milliseconds bound) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    if (!readable_within(fd, bound)) return false;
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

inline bool write_all(int fd, const void* data, size_t n) {
  auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// A blob as a 32-bit length and its bytes.
inline bool send_blob(int fd, std::span<const uint8_t> blob) {
  const auto n = static_cast<uint32_t>(blob.size());
  return write_all(fd, &n, sizeof(n)) && write_all(fd, blob.data(), blob.size());
}

// nullopt on timeout, end of file, or a length over `max`.
inline std::optional<std::vector<uint8_t>> receive_blob(int fd, size_t max,
                                                        std::chrono::milliseconds bound) {
  uint32_t n = 0;
  if (!read_exactly(fd, &n, sizeof(n), bound) || n > max) return std::nullopt;
  std::vector<uint8_t> blob(n);
  if (!read_exactly(fd, blob.data(), n, bound)) return std::nullopt;
  return blob;
}

// A forked child with a pipe each way: body(to_parent, from_parent) runs in the child, and its
// return value is the child's exit code (3 when it throws). The parent gets the other ends (pid
// -1 when a pipe or the fork failed).
struct piped_child {
  pid_t pid = -1;
  int from_child = -1;
  int to_child = -1;
};

template <typename Body>
piped_child fork_piped(Body body) {
  int up[2], down[2];
  if (pipe(up) != 0) return {};
  if (pipe(down) != 0) {
    close(up[0]);
    close(up[1]);
    return {};
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(up[0]);
    close(down[1]);
    int code = 3;
    try {
      code = body(up[1], down[0]);
    } catch (...) {
    }
    _exit(code);
  }
  close(up[1]);
  close(down[0]);
  if (pid < 0) {
    close(up[0]);
    close(down[1]);
    return {};
  }
  return {pid, up[0], down[1]};
}

}  // namespace zc::test
