// Shared memory for a consumer's queue: a memfd mapped read-write in both processes. The fd
// itself travels to the peer (SCM_RIGHTS) rather than a name to reopen, so the memory stays
// reachable while the announcement is in flight even if the consumer has stopped or its process
// has exited. The size is sealed: a peer cannot shrink it under our mapping (that would be a
// SIGBUS on the next access), and map() refuses a segment that is not sealed.
// Thread rules: create and destroy on one thread; the memory is for the queue's atomics.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zc::comch::internal {

class shared_segment {
 public:
  shared_segment() = default;
  // A zeroed, sealed segment of at least `bytes`. Throws status_error(no_memory).
  static shared_segment create(size_t bytes);
  // Maps a segment received from the peer; takes ownership of `fd` (closed once mapped). Throws
  // status_error(invalid_value) when it is not a sealed memfd of at least `min_bytes`.
  static shared_segment map(int fd, size_t min_bytes);

  shared_segment(shared_segment&& other) noexcept { *this = static_cast<shared_segment&&>(other); }
  shared_segment& operator=(shared_segment&& other) noexcept;
  shared_segment(const shared_segment&) = delete;
  shared_segment& operator=(const shared_segment&) = delete;
  ~shared_segment() { reset(); }

  uint8_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  // The creator's fd (dup it to pass it on); -1 on the mapping side.
  int fd() const noexcept { return fd_; }
  void reset() noexcept;

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace zc::comch::internal
