#include "storage/sbc_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "core/bytes.hpp"
#include "core/status.hpp"
#include "storage/internal/fd_io.hpp"
#include "storage/unique_fd.hpp"

namespace zc::storage {
using internal::error_text;

namespace {

unique_fd open_for_read(const std::string& path) {
  unique_fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    throw status_error(err == ENOENT ? status::not_found : status::io_failed,
                       fmt::format("Unable to open {}: {}", path, error_text(err)));
  }
  return fd;
}

// Checks a declared geometry; returns the content size.
uint64_t checked_content_size(uint32_t block_size, uint32_t block_count, std::string_view path) {
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

sbc_header decode_sbc_header(std::span<const uint8_t> bytes, std::string_view name) {
  if (bytes.size() >= 8 && load_be64(bytes.data()) != sbc_magic)
    throw status_error(status::invalid_value, fmt::format("{} is not an .sbc file", name));
  if (bytes.size() < sbc_header_size)
    throw status_error(status::io_failed, fmt::format("{}: .sbc header truncated ({} of {} bytes)",
                                                      name, bytes.size(), sbc_header_size));
  sbc_header h;
  h.block_size = load_be32(bytes.data() + 8);
  h.block_count = load_be32(bytes.data() + 12);
  checked_content_size(h.block_size, h.block_count, name);
  return h;
}

sbc_view decode_sbc(std::span<const uint8_t> bytes, std::string_view name) {
  const sbc_header h = decode_sbc_header(bytes, name);
  const uint64_t available = bytes.size() - sbc_header_size;
  if (available < h.content_size())
    throw status_error(status::io_failed, fmt::format("{}: .sbc content truncated ({} of {} bytes)",
                                                      name, available, h.content_size()));
  return {h, bytes.subspan(sbc_header_size, h.content_size())};
}

namespace {

// The header of an open .sbc file, checked against the file's length before anyone allocates
// memory for the content: a short file must not cost a 2 GiB buffer first.
sbc_header read_sbc_header(int fd, const std::string& path) {
  std::array<uint8_t, sbc_header_size> header{};
  const size_t got = internal::read_fully_at(fd, header, 0, path);
  const sbc_header h = decode_sbc_header(std::span(header).first(got), path);
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw status_error(status::io_failed,
                       fmt::format("Unable to stat {}: {}", path, error_text(errno)));
  const uint64_t available = static_cast<uint64_t>(st.st_size) > sbc_header_size
                                 ? static_cast<uint64_t>(st.st_size) - sbc_header_size
                                 : 0;
  if (S_ISREG(st.st_mode) && available < h.content_size())
    throw status_error(status::io_failed, fmt::format("{}: .sbc content truncated ({} of {} bytes)",
                                                      path, available, h.content_size()));
  return h;
}

bool starts_with_magic(int fd, const std::string& path) {
  uint8_t magic[8];
  return internal::read_fully_at(fd, magic, 0, path) == sizeof(magic) &&
         load_be64(magic) == sbc_magic;
}

}  // namespace

bool is_sbc(const std::string& path) {
  unique_fd fd = open_for_read(path);
  return starts_with_magic(fd.get(), path);
}

sbc_content read_sbc(const std::string& path) {
  unique_fd fd = open_for_read(path);
  const sbc_header h = read_sbc_header(fd.get(), path);
  sbc_content out;
  out.block_size = h.block_size;
  out.block_count = h.block_count;
  out.content.resize(h.content_size());
  const size_t read = internal::read_fully_at(fd.get(), out.content, sbc_header_size, path);
  if (read != out.content.size())
    throw status_error(status::io_failed, fmt::format("{}: .sbc content truncated ({} of {} bytes)",
                                                      path, read, out.content.size()));
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

namespace {
// Writes go out in pieces of about this size: few system calls, constant memory.
constexpr size_t sbc_writer_chunk = 1 << 20;
}  // namespace

sbc_writer::sbc_writer(std::string path, uint32_t block_size, uint32_t block_count)
    : path_(std::move(path)), block_size_(block_size), block_count_(block_count) {
  checked_content_size(block_size, block_count, path_);
  fd_ = unique_fd(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd_)
    throw status_error(status::io_failed,
                       fmt::format("Unable to create {}: {}", path_, error_text(errno)));
  pending_limit_ = std::max<size_t>(sbc_writer_chunk, block_size);
  pending_.reserve(pending_limit_);
  const auto header = encode_sbc_header(block_size, block_count);
  pending_.insert(pending_.end(), header.begin(), header.end());
}

sbc_writer::~sbc_writer() {
  if (finished_) return;
  fd_ = unique_fd();
  ::unlink(path_.c_str());
}

void sbc_writer::flush() {
  internal::write_fully(fd_.get(), pending_, path_);
  pending_.clear();
}

void sbc_writer::append(std::span<const uint8_t> block) {
  if (finished_) throw status_error(status::bad_state, fmt::format("{}: already finished", path_));
  if (block.size() != block_size_)
    throw status_error(status::invalid_value,
                       fmt::format("{}: a block of {} bytes in a file of {}-byte blocks", path_,
                                   block.size(), block_size_));
  if (written_ == block_count_)
    throw status_error(status::invalid_value,
                       fmt::format("{}: more than the {} blocks declared", path_, block_count_));
  if (pending_.size() + block.size() > pending_limit_) flush();
  pending_.insert(pending_.end(), block.begin(), block.end());
  ++written_;
}

void sbc_writer::finish() {
  if (finished_) return;
  if (written_ != block_count_) {
    const uint32_t written = written_;
    throw status_error(status::invalid_value, fmt::format("{}: {} of the {} blocks declared", path_,
                                                          written, block_count_));
  }
  flush();
  // close() is where a full disk or NFS error can surface last.
  if (::close(fd_.release()) != 0)
    throw status_error(status::io_failed,
                       fmt::format("Failed to write {}: {}", path_, error_text(errno)));
  finished_ = true;
}

binary_content_file::binary_content_file(const std::string& path, uint32_t block_size,
                                         uint32_t block_count)
    : path_(path), fd_(open_for_read(path)) {
  sbc_ = starts_with_magic(fd_.get(), path_);
  if (sbc_) {
    geometry_ = read_sbc_header(fd_.get(), path_);
    return;
  }
  geometry_ = {block_size, block_count};
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0)
    throw status_error(status::io_failed,
                       fmt::format("Unable to stat {}: {}", path_, error_text(errno)));
  if (static_cast<uint64_t>(st.st_size) != size())
    throw status_error(status::invalid_value,
                       fmt::format("{} is {} bytes but block size {} x block count {} = {}", path_,
                                   st.st_size, block_size, block_count, size()));
}

void binary_content_file::read_into(std::span<uint8_t> out) const {
  if (out.size() != size())
    throw status_error(status::invalid_value,
                       fmt::format("{}: {} bytes of content do not fit a {}-byte destination",
                                   path_, size(), out.size()));
  const uint64_t offset = sbc_ ? sbc_header_size : 0;
  const size_t read = internal::read_fully_at(fd_.get(), out, offset, path_);
  if (read != out.size())
    throw status_error(status::io_failed,
                       fmt::format("{}: read {} of {} bytes", path_, read, out.size()));
}

sbc_content load_binary_content(const std::string& path, uint32_t block_size,
                                uint32_t block_count) {
  binary_content_file file(path, block_size, block_count);
  sbc_content out;
  out.block_size = file.block_size();
  out.block_count = file.block_count();
  out.content.resize(file.size());
  file.read_into(out.content);
  return out;
}

}  // namespace zc::storage
