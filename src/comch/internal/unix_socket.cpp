#include "comch/internal/unix_socket.hpp"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace zc::comch::internal {
namespace {

// Descriptors that one recvmsg can take; a frame carries at most max_frame_fds (3). The kernel
// drops what does not fit (MSG_CTRUNC), which receive_with_fds reports as EPROTO.
constexpr size_t fds_per_receive = 8;

static_assert(sizeof(sockaddr_un::sun_path) == max_socket_path + 1);

// False (errno ENAMETOOLONG) for a path that is empty, holds a NUL or does not fit.
bool file_address(std::string_view path, sockaddr_un& addr, socklen_t& len) noexcept {
  if (path.empty() || path.size() > max_socket_path || path.find('\0') != path.npos) {
    errno = ENAMETOOLONG;
    return false;
  }
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return true;
}

}  // namespace

int listen_unix(std::string_view path, int backlog) noexcept {
  sockaddr_un addr;
  socklen_t len;
  if (!file_address(path, addr, len)) return -1;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    close_fd(fd);
    return -1;
  }
  if (listen(fd, backlog) != 0) {
    const int saved = errno;
    unlink(addr.sun_path);  // the file bind() made would otherwise look like a stale server
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

int connect_unix(std::string_view path) noexcept {
  sockaddr_un addr;
  socklen_t len;
  if (!file_address(path, addr, len)) return -1;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    close_fd(fd);
    return -1;
  }
  return fd;
}

bool peer_of(int fd, peer_credentials& out) noexcept {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred))
    return false;
  out.pid = cred.pid;
  out.uid = cred.uid;
  out.gid = cred.gid;
  return true;
}

ssize_t send_with_fds(int fd, const iovec* iov, size_t iov_count,
                      std::span<const int> fds) noexcept {
  msghdr msg{};
  msg.msg_iov = const_cast<iovec*>(iov);
  msg.msg_iovlen = iov_count;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fds_per_receive)];
  if (!fds.empty()) {
    if (fds.size() > fds_per_receive) {
      errno = EINVAL;
      return -1;
    }
    const size_t bytes = sizeof(int) * fds.size();
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(bytes);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(bytes);
    std::memcpy(CMSG_DATA(c), fds.data(), bytes);
  }
  ssize_t n;
  do {
    n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  return n;
}

ssize_t receive_with_fds(int fd, uint8_t* buf, size_t length, std::vector<int>& fds) noexcept {
  iovec iov{buf, length};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * fds_per_receive)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return n;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      try {
        fds.push_back(received);
      } catch (...) {
        close_fd(received);
      }
    }
  }
  if ((msg.msg_flags & MSG_CTRUNC) != 0) {
    errno = EPROTO;
    return -1;
  }
  return n;
}

int make_doorbell() noexcept {
  return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

void ring(int fd) noexcept {
  if (fd < 0) return;
  uint64_t one = 1;
  ssize_t r;
  do {
    r = write(fd, &one, sizeof(one));
  } while (r < 0 && errno == EINTR);
}

void drain(int fd) noexcept {
  if (fd < 0) return;
  uint64_t value;
  ssize_t r;
  do {
    r = read(fd, &value, sizeof(value));
  } while (r < 0 && errno == EINTR);
}

void close_fd(int fd) noexcept {
  if (fd < 0) return;
  int saved = errno;
  close(fd);
  errno = saved;
}

}  // namespace zc::comch::internal
