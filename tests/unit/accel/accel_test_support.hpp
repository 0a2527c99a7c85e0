// What the accel tests share: buffers over plain vectors, and the reference values computed
// without the code under test (liblz4's own frame output; GF(2^8) arithmetic written here).
#pragma once

#include <lz4frame.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "core/buffer.hpp"
#include "core/memory_map.hpp"

namespace zc::accel::test {

// Byte vectors wrapped in memory maps, handed out as core::buffers.
class buffers {
 public:
  // A buffer whose data section is `bytes` (copied into storage this object owns).
  core::buffer& with_data(const std::vector<uint8_t>& bytes) {
    auto& mem = store(bytes.size(), bytes);
    core::buffer* b = nullptr;
    if (!ok(inventory_.get_by_data(*maps_.back(), mem.data(), mem.size(), b)))
      throw std::runtime_error("buffer");
    return *b;
  }
  // An empty buffer with `capacity` bytes of tail room (filled with 0xEE to see stray writes).
  core::buffer& empty(size_t capacity) {
    auto& mem = store(capacity, std::vector<uint8_t>(capacity, 0xEE));
    core::buffer* b = nullptr;
    if (!ok(inventory_.get_by_addr(*maps_.back(), mem.data(), mem.size(), b)))
      throw std::runtime_error("buffer");
    return *b;
  }
  static std::vector<uint8_t> data_of(const core::buffer& b) {
    return std::vector<uint8_t>(b.data(), b.data() + b.data_length());
  }

 private:
  std::vector<uint8_t>& store(size_t size, const std::vector<uint8_t>& init) {
    memory_.push_back(std::make_unique<std::vector<uint8_t>>(init));
    memory_.back()->resize(std::max<size_t>(size, 1));
    maps_.push_back(core::memory_map::wrap(memory_.back()->data(), memory_.back()->size(),
                                           core::access::local_read_write));
    memory_.back()->resize(size);
    return *memory_.back();
  }
  std::vector<std::unique_ptr<std::vector<uint8_t>>> memory_;
  std::vector<std::unique_ptr<core::memory_map>> maps_;
  core::buffer_inventory inventory_{1024};
};

inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// Compressible: the byte pattern i mod 256 of REFERENCE_SPEC §5.2, with a seed-dependent start.
inline std::vector<uint8_t> pattern_bytes(size_t n, uint32_t seed = 0) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i + seed);
  return out;
}

// The image built from liblz4's own one-shot frame: LZ4F_compressFrame with the §5.2 settings,
// its frame header (LZ4F_headerSize) and 4-byte end mark cut off, then header, padding, trailer.
// Empty when it does not fit.
inline std::vector<uint8_t> reference_image(const std::vector<uint8_t>& block) {
  LZ4F_preferences_t p;
  std::memset(&p, 0, sizeof(p));
  p.frameInfo.blockSizeID = LZ4F_max64KB;
  p.frameInfo.blockMode = LZ4F_blockIndependent;
  p.compressionLevel = 1;
  p.autoFlush = 1;
  std::vector<uint8_t> frame(LZ4F_compressFrameBound(block.size(), &p));
  const size_t n = LZ4F_compressFrame(frame.data(), frame.size(), block.data(), block.size(), &p);
  if (LZ4F_isError(n)) throw std::runtime_error("LZ4F_compressFrame");
  const size_t header = LZ4F_headerSize(frame.data(), n);
  if (LZ4F_isError(header)) throw std::runtime_error("LZ4F_headerSize");
  const size_t end_mark = 4;
  const size_t c = n - header - end_mark;
  if (c + 12 > block.size()) return {};
  std::vector<uint8_t> image(block.size(), 0);
  const uint32_t b = static_cast<uint32_t>(block.size());
  image[0] = uint8_t(b >> 24), image[1] = uint8_t(b >> 16), image[2] = uint8_t(b >> 8);
  image[3] = uint8_t(b);
  image[4] = uint8_t(c >> 24), image[5] = uint8_t(c >> 16), image[6] = uint8_t(c >> 8);
  image[7] = uint8_t(c);
  std::memcpy(image.data() + 8, frame.data() + header, c);
  return image;
}

// GF(2^8) with ISA-L's polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D), by shift and add.
inline uint8_t gf_mul(uint8_t a, uint8_t b) {
  uint8_t r = 0;
  while (b != 0) {
    if (b & 1) r ^= a;
    const bool carry = a & 0x80;
    a = static_cast<uint8_t>(a << 1);
    if (carry) a ^= 0x1D;
    b >>= 1;
  }
  return r;
}
inline uint8_t gf_inv(uint8_t a) {
  for (int x = 1; x < 256; ++x)
    if (gf_mul(a, static_cast<uint8_t>(x)) == 1) return static_cast<uint8_t>(x);
  throw std::runtime_error("no inverse");
}
// The parity row (a, b): ISA-L's Vandermonde row k is [1, 1]; its Cauchy row k is
// [1/(k^0), 1/(k^1)] = [1/2, 1/3] for k = 2.
struct parity_row {
  uint8_t a, b;
};
inline parity_row vandermonde_row() {
  return {1, 1};
}
inline parity_row cauchy_row() {
  return {gf_inv(2), gf_inv(3)};
}
inline std::vector<uint8_t> parity(parity_row row, const std::vector<uint8_t>& d1,
                                   const std::vector<uint8_t>& d2) {
  std::vector<uint8_t> p(d1.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = gf_mul(row.a, d1[i]) ^ gf_mul(row.b, d2[i]);
  return p;
}

}  // namespace zc::accel::test
