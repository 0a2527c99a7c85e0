// What the NBD server needs from storage: its geometry and asynchronous IO into memory the
// backend owns, so that read data goes to the socket straight from that memory and write
// payloads are received straight into it. The server (one thread) acquires an io with memory for
// a request, fills or reads it, submits it, and takes it back from take_completions() once the
// completion fd turned readable; then it releases it.
//
//   io* x = b.acquire(length);            // nullptr: none free now, retry after a completion
//   x->kind = io_kind::read; x->offset = off;  b.submit(*x);
//   ... epoll says completion_fd() is readable ...
//   b.take_completions(done);  for (io* d : done) { send(d->segments()); b.release(*d); }
//
// Thread rules: every method is for the server's thread; a backend may complete IO on its own
// threads, but hands the ios back on the server's thread only. A backend on the server's thread
// (run to completion) completes ios there and asks for the server's next pass itself.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.hpp"

namespace zc::nbd {

// write_zeroes: a write of zeros over the io's memory's range; the backend fills the memory
// itself (off the server's thread).
// The sparse kinds move no data and may be answered invalid_value by storage that does not know
// them (a reference target, the gga service): the server then falls back.
// discard, zero_range: `extent` bytes from `offset` (acquired with length 0): dropped (may read
// back as zeros or as before), or made to read back as zeros (the storage may deallocate them).
// allocation_map: the io's memory receives a bitmap of length * 8 blocks from `offset`, bit i
// (byte i / 8, least significant bit first) 1 when that block is allocated or may not be zeros.
enum class io_kind : uint8_t {
  read,
  write,
  flush,
  write_zeroes,
  discard,
  zero_range,
  allocation_map
};

// Kinds that change the storage's bytes.
constexpr bool writes(io_kind k) noexcept {
  return k == io_kind::write || k == io_kind::write_zeroes || k == io_kind::discard ||
         k == io_kind::zero_range;
}

// One unit of IO, owned by the backend between acquire() and release().
struct io {
  io_kind kind = io_kind::read;
  uint64_t offset = 0;              // bytes into the storage; block aligned
  uint32_t length = 0;              // bytes of memory; 0 for a flush, discard and zero_range
  uint32_t extent = 0;              // discard and zero_range: bytes of storage (whole blocks)
  status result = status::success;  // set by the backend before it hands the io back
  // The server's bookkeeping, untouched by the backend.
  void* owner = nullptr;
  uint64_t tag = 0;
  // The memory for `length` bytes, in order: set by acquire(); the backend's own.
  std::span<const iovec> segments;
};

class backend {
 public:
  virtual ~backend() = default;

  virtual uint64_t size() const noexcept = 0;        // bytes
  virtual uint32_t block_size() const noexcept = 0;  // the smallest aligned unit
  // The most bytes one acquire() may ask for (a multiple of block_size()).
  virtual uint32_t max_io() const noexcept = 0;
  // Bytes of IO memory in all, and the backend's queue entries in all (an io of `length` bytes
  // takes slots_for(length) of them, at least 1): the server shares both among its connections.
  virtual uint64_t memory() const noexcept = 0;
  virtual uint32_t slots() const noexcept = 0;
  virtual uint32_t slots_for(uint32_t length) const noexcept = 0;
  virtual bool read_only() const noexcept = 0;

  // An io with memory for `length` bytes (0 < length <= max_io(), a whole number of blocks except
  // for an allocation map; or 0 for a flush, discard or zero_range), or nullptr when the memory is
  // all taken (retry once a completion has been released).
  virtual io* acquire(uint32_t length) noexcept = 0;
  // Starts x (kind and offset set; for a write its memory filled). It comes back through
  // take_completions() with its result, even when it cannot start.
  virtual void submit(io& x) noexcept = 0;
  virtual void release(io& x) noexcept = 0;

  // Readable while completed ios wait to be taken; -1 for a backend that completes on the
  // server's own thread (has_completions() says when).
  virtual int completion_fd() const noexcept = 0;
  // Completed ios wait that no fd announced: the server checks after each pass's events.
  virtual bool has_completions() const noexcept { return false; }
  // Appends every completed io to `out` and clears the fd's readiness.
  virtual void take_completions(std::vector<io*>& out) = 0;
};

}  // namespace zc::nbd
