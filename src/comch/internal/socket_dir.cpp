#include "comch/internal/socket_dir.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "comch/internal/unix_socket.hpp"
#include "core/status.hpp"

namespace zc::comch::internal {
namespace {

// The lock is held for a few system calls at a time; waiting longer means something is wrong.
constexpr std::chrono::milliseconds directory_lock_timeout{2000};
constexpr std::chrono::milliseconds directory_lock_retry{1};
constexpr std::string_view runtime_subdirectory = "zcstore-comch";
constexpr std::string_view fallback_prefix = "/tmp/zcstore-comch-";
constexpr mode_t private_mode = 0700;
constexpr mode_t group_and_other_bits = 0077;

// An exclusive flock on the directory, taken with a bounded wait; held() says whether it was.
// errno after a failure: ETIMEDOUT, or what open() or flock() said.
class directory_lock {
 public:
  explicit directory_lock(const std::string& directory) noexcept {
    fd_ = open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd_ < 0) return;
    const auto give_up = std::chrono::steady_clock::now() + directory_lock_timeout;
    for (;;) {
      if (flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK) break;
      if (std::chrono::steady_clock::now() >= give_up) {
        errno = ETIMEDOUT;
        break;
      }
      std::this_thread::sleep_for(directory_lock_retry);
    }
    close_fd(fd_);
    fd_ = -1;
  }
  ~directory_lock() { close_fd(fd_); }  // closing drops the lock
  directory_lock(const directory_lock&) = delete;
  directory_lock& operator=(const directory_lock&) = delete;

  bool held() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

[[noreturn]] void refuse(const std::string& path, const std::string& reason) {
  throw status_error(status::not_permitted,
                     fmt::format("comch socket directory {} {}; it must be a real directory owned "
                                 "by uid {} with mode 0700 (remove it, or name another in {})",
                                 path, reason, geteuid(), socket_dir_variable));
}

bool owned_directory(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid();
}

std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

std::string socket_directory() {
  std::string path;
  if (const char* forced = std::getenv(socket_dir_variable); forced != nullptr && *forced != '\0') {
    if (forced[0] != '/')
      throw status_error(status::bad_config, fmt::format("{} must be an absolute path, not \"{}\"",
                                                         socket_dir_variable, forced));
    path = without_trailing_slashes(forced);
  } else if (const char* runtime = std::getenv("XDG_RUNTIME_DIR");
             runtime != nullptr && runtime[0] == '/' && owned_directory(runtime)) {
    path = fmt::format("{}/{}", without_trailing_slashes(runtime), runtime_subdirectory);
  } else {
    path = fmt::format("{}{}", fallback_prefix, geteuid());
  }
  ensure_private_directory(path);
  return path;
}

void ensure_private_directory(const std::string& path) {
  if (mkdir(path.c_str(), private_mode) != 0 && errno != EEXIST)
    throw status_error(
        status::operating_system,
        fmt::format("cannot create the comch socket directory {}: {}", path, std::strerror(errno)));
  // lstat, not stat: a symlink could point anywhere, including at another user's directory.
  struct stat st;
  if (lstat(path.c_str(), &st) != 0)
    throw status_error(status::operating_system,
                       fmt::format("cannot examine the comch socket directory {}: {}", path,
                                   std::strerror(errno)));
  if (S_ISLNK(st.st_mode)) refuse(path, "is a symlink");
  if (!S_ISDIR(st.st_mode)) refuse(path, "is not a directory");
  if (st.st_uid != geteuid()) refuse(path, fmt::format("is owned by uid {}", st.st_uid));
  if ((st.st_mode & group_and_other_bits) != 0)
    refuse(path,
           fmt::format("has mode {:04o}, so group or others have access", st.st_mode & 07777));
}

int listen_in_directory(const std::string& directory, const std::string& path, int backlog,
                        socket_file_id& created) noexcept {
  directory_lock lock(directory);
  if (!lock.held()) return -1;
  // Two tries: the second follows the removal of a stale file.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = listen_unix(path, backlog);
    if (fd >= 0) {
      struct stat st;
      if (lstat(path.c_str(), &st) != 0) {
        const int saved = errno;
        close_fd(fd);
        errno = saved;
        return -1;
      }
      created = {st.st_dev, st.st_ino};
      return fd;
    }
    if (errno != EADDRINUSE || attempt > 0) return -1;
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return -1;
    }
    if (!S_ISSOCK(st.st_mode)) {
      errno = EEXIST;
      return -1;
    }
    // Only a file nobody listens on is stale; a live server keeps its name.
    const int probe = connect_unix(path);
    if (probe >= 0 || errno == EAGAIN) {
      close_fd(probe);
      errno = EADDRINUSE;
      return -1;
    }
    if (errno != ECONNREFUSED) return -1;
    if (unlink(path.c_str()) != 0 && errno != ENOENT) return -1;
  }
  return -1;  // not reached: the second try returns
}

void remove_socket_file(const std::string& directory, const std::string& path,
                        const socket_file_id& created) noexcept {
  directory_lock lock(directory);
  if (!lock.held()) return;  // a stale file is harmless: the next server of the name removes it
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 || st.st_dev != created.device || st.st_ino != created.inode)
    return;
  // The same inode number may have been given to a newer server's file once ours was removed as
  // stale; that one listens, ours (closed) does not.
  const int probe = connect_unix(path);
  if (probe >= 0 || errno != ECONNREFUSED) {
    close_fd(probe);
    return;
  }
  unlink(path.c_str());
}

}  // namespace zc::comch::internal
