#include "comch/internal/shared_segment.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "comch/internal/unix_socket.hpp"
#include "core/status.hpp"

namespace zc::comch::internal {
namespace {

constexpr int size_seals = F_SEAL_SHRINK | F_SEAL_GROW;

size_t page_round(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

}  // namespace

shared_segment& shared_segment::operator=(shared_segment&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = other.data_;
    size_ = other.size_;
    fd_ = other.fd_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.fd_ = -1;
  }
  return *this;
}

void shared_segment::reset() noexcept {
  if (data_ != nullptr) munmap(data_, size_);
  close_fd(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

shared_segment shared_segment::create(size_t bytes) {
  shared_segment s;
  s.size_ = page_round(bytes);
  s.fd_ = memfd_create("zcstore-comch-queue", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (s.fd_ < 0 || ftruncate(s.fd_, static_cast<off_t>(s.size_)) != 0 ||
      fcntl(s.fd_, F_ADD_SEALS, size_seals) != 0)
    throw status_error(status::no_memory,
                       fmt::format("comch: cannot create a queue segment: {}", strerror(errno)));
  void* p = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd_, 0);
  if (p == MAP_FAILED)
    throw status_error(status::no_memory,
                       fmt::format("comch: cannot map a queue segment: {}", strerror(errno)));
  s.data_ = static_cast<uint8_t*>(p);
  return s;
}

shared_segment shared_segment::map(int fd, size_t min_bytes) {
  shared_segment s;
  s.fd_ = fd;  // closed by reset() on every path
  struct stat st {};
  const int seals = fcntl(fd, F_GET_SEALS);
  if (fstat(fd, &st) != 0 || seals < 0 || (seals & size_seals) != size_seals ||
      static_cast<uint64_t>(st.st_size) < min_bytes)
    throw status_error(status::invalid_value,
                       "comch: the peer's queue is not a sealed memfd of the announced size");
  s.size_ = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    throw status_error(status::no_memory,
                       fmt::format("comch: cannot map the peer's queue: {}", strerror(errno)));
  s.data_ = static_cast<uint8_t*>(p);
  close_fd(s.fd_);  // the mapping keeps the memory
  s.fd_ = -1;
  return s;
}

}  // namespace zc::comch::internal
