#include "storage/sbc_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <system_error>

#include "core/bytes.hpp"
#include "core/status.hpp"
#include "storage/internal/fd_io.hpp"
#include "storage/unique_fd.hpp"

namespace zc::storage {
namespace {

std::string error_text(int err) {
  return std::generic_category().message(err);
}

unique_fd open_for_read(const std::string& path) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    throw status_error(err == ENOENT ? status::not_found : status::io_failed,
                       fmt::format("Unable to open {}: {}", path, error_text(err)));
  }
  return fd;
}

// Reads up to `out.size()` bytes; returns how many (fewer only at end of file).
size_t read_fully(int fd, std::span<uint8_t> out, const std::string& path) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(fd, out.data() + done, out.size() - done);
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

// Checks a declared geometry; returns the content size.
uint64_t checked_content_size(uint32_t block_size, uint32_t block_count, const std::string& path) {
  if (block_size == 0 || block_count == 0)
    throw status_error(status::invalid_value,
                       fmt::format("{}: block_size {} x block_count {} describes no content", path,
                                   block_size, block_count));
  const uint64_t size = uint64_t(block_size) * block_count;
  if (size > sbc_max_content_size)
    throw status_error(status::too_big,
                       fmt::format("Exceeded limit: {} declares {} x {} = {} bytes, more than {}",
                                   path, block_size, block_count, size, sbc_max_content_size));
  return size;
}

}  // namespace

std::array<uint8_t, sbc_header_size> encode_sbc_header(uint32_t block_size, uint32_t block_count) {
  std::array<uint8_t, sbc_header_size> header{};
  store_be64(header.data(), sbc_magic);
  store_be32(header.data() + 8, block_size);
  store_be32(header.data() + 12, block_count);
  return header;
}

bool is_sbc(const std::string& path) {
  unique_fd fd = open_for_read(path);
  uint8_t magic[8];
  return read_fully(fd.get(), magic, path) == sizeof(magic) && load_be64(magic) == sbc_magic;
}

sbc_content read_sbc(const std::string& path) {
  unique_fd fd = open_for_read(path);
  std::array<uint8_t, sbc_header_size> header{};
  const size_t got = read_fully(fd.get(), header, path);
  if (got >= 8 && load_be64(header.data()) != sbc_magic)
    throw status_error(status::invalid_value, fmt::format("{} is not an .sbc file", path));
  if (got < header.size())
    throw status_error(status::io_failed, fmt::format("{}: .sbc header truncated ({} of {} bytes)",
                                                      path, got, header.size()));
  sbc_content out;
  out.block_size = load_be32(header.data() + 8);
  out.block_count = load_be32(header.data() + 12);
  const uint64_t size = checked_content_size(out.block_size, out.block_count, path);
  // Check the length before allocating: a short file must not cost a 2 GiB buffer first.
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw status_error(status::io_failed,
                       fmt::format("Unable to stat {}: {}", path, error_text(errno)));
  const uint64_t available = static_cast<uint64_t>(st.st_size) > sbc_header_size
                                 ? static_cast<uint64_t>(st.st_size) - sbc_header_size
                                 : 0;
  if (S_ISREG(st.st_mode) && available < size)
    throw status_error(status::io_failed, fmt::format("{}: .sbc content truncated ({} of {} bytes)",
                                                      path, available, size));
  out.content.resize(size);
  const size_t read = read_fully(fd.get(), out.content, path);
  if (read != size)
    throw status_error(status::io_failed, fmt::format("{}: .sbc content truncated ({} of {} bytes)",
                                                      path, read, size));
  return out;
}

void write_sbc(const std::string& path, uint32_t block_size, uint32_t block_count,
               std::span<const uint8_t> content) {
  const uint64_t size = checked_content_size(block_size, block_count, path);
  if (content.size() != size)
    throw status_error(status::invalid_value,
                       fmt::format("{}: content is {} bytes but the header declares {} x {} = {}",
                                   path, content.size(), block_size, block_count, size));
  unique_fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd)
    throw status_error(status::io_failed,
                       fmt::format("Unable to create {}: {}", path, error_text(errno)));
  internal::write_fully(fd.get(), encode_sbc_header(block_size, block_count), path);
  internal::write_fully(fd.get(), content, path);
  // close() is where a full disk or NFS error can surface last.
  if (::close(fd.release()) != 0)
    throw status_error(status::io_failed,
                       fmt::format("Failed to write {}: {}", path, error_text(errno)));
}

sbc_content load_binary_content(const std::string& path, uint32_t block_size,
                                uint32_t block_count) {
  if (is_sbc(path)) return read_sbc(path);
  sbc_content out;
  out.block_size = block_size;
  out.block_count = block_count;
  const uint64_t expected = uint64_t(block_size) * block_count;
  unique_fd fd = open_for_read(path);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    throw status_error(status::io_failed,
                       fmt::format("Unable to stat {}: {}", path, error_text(errno)));
  if (static_cast<uint64_t>(st.st_size) != expected)
    throw status_error(status::invalid_value,
                       fmt::format("{} is {} bytes but block size {} x block count {} = {}", path,
                                   st.st_size, block_size, block_count, expected));
  out.content.resize(expected);
  const size_t read = read_fully(fd.get(), out.content, path);
  if (read != expected)
    throw status_error(status::io_failed,
                       fmt::format("{}: read {} of {} bytes", path, read, expected));
  return out;
}

}  // namespace zc::storage
