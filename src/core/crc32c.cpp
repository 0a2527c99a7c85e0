#include "core/crc32c.hpp"

#include <isa-l/crc.h>

#include <climits>

namespace zc::core {

uint32_t crc32c(std::span<const uint8_t> data) noexcept {
  uint32_t crc = 0xFFFFFFFFu;
  const uint8_t* p = data.data();
  size_t left = data.size();
  // ISA-L takes an int length: a larger span goes through in pieces, the running value carried.
  while (left != 0) {
    const size_t n = left < size_t(INT_MAX) ? left : size_t(INT_MAX);
    crc = crc32_iscsi(const_cast<uint8_t*>(p), static_cast<int>(n), crc);
    p += n;
    left -= n;
  }
  return ~crc;
}

}  // namespace zc::core
