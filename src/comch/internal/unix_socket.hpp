// The operating-system side of the comch control socket: Unix stream sockets bound to a file
// (inside the user's private directory, see socket_dir.hpp), peer credentials (SO_PEERCRED) and
// sendmsg/recvmsg with descriptors passed as SCM_RIGHTS, plus the eventfd doorbells of the fast
// path. Plain functions over file descriptors, no state. Thread rules: any thread.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace zc::comch::internal {

// Longest socket path Linux accepts: sun_path (108 bytes) less its terminating NUL.
inline constexpr size_t max_socket_path = 107;

struct peer_credentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// A non-blocking listening socket bound to the socket file `path`, which bind() creates; -1 with
// errno on failure (EADDRINUSE when a file of that name exists, listened on or not;
// ENAMETOOLONG when `path` does not fit in sun_path).
int listen_unix(std::string_view path, int backlog) noexcept;
// A non-blocking socket connected to the socket file `path`; -1 with errno on failure (ENOENT
// when there is no such file, ECONNREFUSED when nobody listens on it, EAGAIN when its backlog is
// full, EACCES when the directory is not ours to search).
int connect_unix(std::string_view path) noexcept;
// Who is at the other end of a connected Unix socket (as the kernel saw it at connect time).
bool peer_of(int fd, peer_credentials& out) noexcept;

// sendmsg(MSG_NOSIGNAL | MSG_DONTWAIT) of `iov`, with `fds` attached to the first byte.
// Returns the bytes written, or -1 with errno.
ssize_t send_with_fds(int fd, const iovec* iov, size_t iov_count,
                      std::span<const int> fds) noexcept;
// recvmsg(MSG_DONTWAIT | MSG_CMSG_CLOEXEC) into [buf, buf+length); descriptors that came with
// the bytes are appended to `fds`. Returns the bytes read, 0 at end of stream, or -1 with errno
// (EPROTO when the kernel had to drop descriptors).
ssize_t receive_with_fds(int fd, uint8_t* buf, size_t length, std::vector<int>& fds) noexcept;

// A non-blocking, close-on-exec eventfd (-1 on failure).
int make_doorbell() noexcept;
// Adds one to an eventfd; a full counter is ignored (the peer is awake anyway).
void ring(int fd) noexcept;
// Reads an eventfd back to zero.
void drain(int fd) noexcept;
// close() that keeps errno and ignores -1.
void close_fd(int fd) noexcept;

}  // namespace zc::comch::internal
