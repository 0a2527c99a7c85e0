#include "storage/unique_fd.hpp"

#include <unistd.h>

namespace zc::storage {

void unique_fd::reset(int fd) noexcept {
  // close() is not retried on EINTR: on Linux the descriptor is gone either way, and a retry
  // could close a descriptor another thread just opened.
  if (fd_ >= 0 && fd_ != fd) ::close(fd_);
  fd_ = fd;
}

}  // namespace zc::storage
