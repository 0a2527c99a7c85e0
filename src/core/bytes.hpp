// Big-endian field access and bounds-checked readers/writers for wire formats (control messages,
// IO messages, blobs, .sbc headers). A reader never reads past its span: a short input makes
// ok() false and every later read return zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zc {

inline uint16_t load_be16(const uint8_t* p) noexcept {
  return uint16_t(p[0] << 8 | p[1]);
}
inline uint32_t load_be32(const uint8_t* p) noexcept {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}
inline uint64_t load_be64(const uint8_t* p) noexcept {
  return uint64_t(load_be32(p)) << 32 | load_be32(p + 4);
}
inline void store_be16(uint8_t* p, uint16_t v) noexcept {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
inline void store_be32(uint8_t* p, uint32_t v) noexcept {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = uint8_t(v);
}
inline void store_be64(uint8_t* p, uint64_t v) noexcept {
  store_be32(p, uint32_t(v >> 32));
  store_be32(p + 4, uint32_t(v));
}

// Appends big-endian fields to a growing byte vector.
class byte_writer {
 public:
  explicit byte_writer(std::vector<uint8_t>& out) : out_(out) {}
  void u16(uint16_t v) { store_be16(grow(2), v); }
  void u32(uint32_t v) { store_be32(grow(4), v); }
  void u64(uint64_t v) { store_be64(grow(8), v); }
  void bytes(std::span<const uint8_t> data) {
    if (!data.empty()) std::memcpy(grow(data.size()), data.data(), data.size());
  }
  // u32 length, then the bytes (the reference's string/blob encoding).
  void sized_bytes(std::span<const uint8_t> data) {
    u32(static_cast<uint32_t>(data.size()));
    bytes(data);
  }
  void sized_string(std::string_view s) {
    sized_bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }

 private:
  uint8_t* grow(size_t n) {
    out_.resize(out_.size() + n);
    return out_.data() + out_.size() - n;
  }
  std::vector<uint8_t>& out_;
};

// Reads big-endian fields from a span, failing (not over-reading) on a short input.
class byte_reader {
 public:
  explicit byte_reader(std::span<const uint8_t> in) : in_(in) {}
  bool ok() const noexcept { return ok_; }
  size_t remaining() const noexcept { return ok_ ? in_.size() - pos_ : 0; }
  uint16_t u16() noexcept { return take(2) ? load_be16(in_.data() + pos_ - 2) : 0; }
  uint32_t u32() noexcept { return take(4) ? load_be32(in_.data() + pos_ - 4) : 0; }
  uint64_t u64() noexcept { return take(8) ? load_be64(in_.data() + pos_ - 8) : 0; }
  std::span<const uint8_t> bytes(size_t n) noexcept {
    return take(n) ? in_.subspan(pos_ - n, n) : std::span<const uint8_t>{};
  }
  // u32 length then that many bytes; fails if the length runs past the end.
  std::span<const uint8_t> sized_bytes() noexcept {
    uint32_t n = u32();
    return bytes(n);
  }
  std::string sized_string() {
    auto b = sized_bytes();
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }

 private:
  bool take(size_t n) noexcept {
    if (!ok_ || in_.size() - pos_ < n) {
      ok_ = false;
      return false;
    }
    pos_ += n;
    return true;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace zc
