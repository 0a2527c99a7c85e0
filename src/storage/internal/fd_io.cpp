#include "storage/internal/fd_io.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <system_error>

#include "core/status.hpp"

namespace zc::storage::internal {

std::string error_text(int err) {
  return std::generic_category().message(err);
}

void write_fully(int fd, std::span<const uint8_t> data, const std::string& path,
                 write_function write) {
  if (write == nullptr) write = ::write;
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int err = n < 0 ? errno : 0;
    if (err == EINTR) continue;
    if (err != 0)
      throw status_error(status::io_failed,
                         fmt::format("Failed to write {}: {}", path, error_text(err)));
    throw status_error(status::io_failed,
                       fmt::format("Failed to write {}: no byte written ({} of {} bytes done)",
                                   path, done, data.size()));
  }
}

size_t read_fully_at(int fd, std::span<uint8_t> out, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      throw status_error(status::io_failed,
                         fmt::format("Failed to read {}: {}", path, error_text(errno)));
    }
  }
  return done;
}

}  // namespace zc::storage::internal
