// The 64-byte IO message of the data path (REFERENCE_SPEC §3.1, docs/FORMATS.md): a view that
// reads and writes big-endian fields in place in a buffer the caller owns (a task's message
// buffer). No allocation, no copies. Thread rules: those of the buffer it views.
//
//   io_message_view m{buffer};
//   m.set_type(io_message_type::read);
//   m.set_io_size(4096);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/bytes.hpp"
#include "core/status.hpp"

namespace zc::storage {

// One cache line; the wire layout is fixed by the reference.
inline constexpr size_t io_message_size = 64;

enum class io_message_type : uint32_t {
  result = 0,
  read = 1,
  write = 2,
  // zcstore's extension (DESIGN §2): io_size 0; answered once every completed write of the target
  // is durable. A reference target answers it INVALID_VALUE ("flush not supported").
  flush = 3,
  // zcstore's extensions (DESIGN §2, FORMATS §2.1), no data moved unless said; a reference target
  // answers each INVALID_VALUE and front ends fall back. io_size is the range's bytes (whole
  // blocks) for discard and write_zeroes; for allocation_map it is the bitmap's bytes, written by
  // the target at requester_offset: bit i (byte i / 8, bit i % 8, least significant first) is 1
  // when block storage_offset / block_size + i is allocated or may not read back as zeros.
  discard = 4,         // the range may read back as zeros or as before
  write_zeroes = 5,    // the range reads back as zeros (the storage may be deallocated)
  allocation_map = 6,  // io_size * 8 blocks from storage_offset, the bits past the end 0
};

// The largest allocation map one IO asks for, in bytes (io_size): 32768 blocks. A target refuses
// a larger one with INVALID_VALUE; each of its transaction slots holds one bitmap this size.
inline constexpr uint32_t max_allocation_map_size = 4096;

// Field offsets in bytes. 4..7 is padding and 40..63 is unused: both travel as they are.
namespace io_message_offset {
inline constexpr size_t type = 0;
inline constexpr size_t user_data = 8;
inline constexpr size_t result = 16;
inline constexpr size_t io_size = 20;
inline constexpr size_t requester_offset = 24;
inline constexpr size_t storage_offset = 32;
}  // namespace io_message_offset

class io_message_view {
 public:
  explicit io_message_view(std::span<uint8_t, io_message_size> buffer) noexcept
      : p_(buffer.data()) {}
  // `buffer` must hold at least io_message_size bytes.
  explicit io_message_view(uint8_t* buffer) noexcept : p_(buffer) {}

  // May hold a value outside io_message_type when a peer sends one; check is_known_type().
  io_message_type type() const noexcept {
    return static_cast<io_message_type>(load_be32(p_ + io_message_offset::type));
  }
  bool is_known_type() const noexcept {
    return load_be32(p_ + io_message_offset::type) <=
           static_cast<uint32_t>(io_message_type::allocation_map);
  }
  uint64_t user_data() const noexcept { return load_be64(p_ + io_message_offset::user_data); }
  // The raw wire value, even one zc::status does not name.
  status result() const noexcept {
    return static_cast<status>(load_be32(p_ + io_message_offset::result));
  }
  uint32_t io_size() const noexcept { return load_be32(p_ + io_message_offset::io_size); }
  uint64_t requester_offset() const noexcept {
    return load_be64(p_ + io_message_offset::requester_offset);
  }
  uint64_t storage_offset() const noexcept {
    return load_be64(p_ + io_message_offset::storage_offset);
  }

  void set_type(io_message_type v) noexcept {
    store_be32(p_ + io_message_offset::type, static_cast<uint32_t>(v));
  }
  void set_user_data(uint64_t v) noexcept { store_be64(p_ + io_message_offset::user_data, v); }
  void set_result(status v) noexcept {
    store_be32(p_ + io_message_offset::result, static_cast<uint32_t>(v));
  }
  void set_io_size(uint32_t v) noexcept { store_be32(p_ + io_message_offset::io_size, v); }
  void set_requester_offset(uint64_t v) noexcept {
    store_be64(p_ + io_message_offset::requester_offset, v);
  }
  void set_storage_offset(uint64_t v) noexcept {
    store_be64(p_ + io_message_offset::storage_offset, v);
  }

  // Zeroes all 64 bytes. The reference leaves padding undefined; zeroing it keeps stale memory
  // off the wire.
  void clear() noexcept;

  uint8_t* data() const noexcept { return p_; }

 private:
  uint8_t* p_;
};

}  // namespace zc::storage
