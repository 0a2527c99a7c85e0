// libFuzzer harness for the gga format v2 volume label (docs/FORMATS.md §4.3) as read from a
// target's last block: decode_gga_label on 32 bytes. Input: byte 0 says whether the harness first
// gives the label its magic, version and a good check (bit 0: magic and version, bit 1: check), so
// that the fuzzer reaches the field rules; then the 32 bytes (missing bytes read as zero). The
// document's rules are the oracle: all zero is blank; anything else is a label exactly when it has
// the magic "ZCG2", version 1, a check equal to the CRC-32C of the 32 bytes with the check field
// zeroed, a role of 0-2, a matrix of 0 or 1, H and volume not 0, and a missed field naming other
// roles only; a label's fields are its bytes, and it encodes back to the same bytes. Any crash,
// sanitizer report or abort is a finding.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "accel/gga_format.hpp"
#include "core/crc32c.hpp"

namespace {

using namespace zc;
using namespace zc::accel;

void check(bool condition) {
  if (!condition) std::abort();
}

using label_bytes = std::array<uint8_t, gga_label_size>;
constexpr size_t check_at = 12;

uint64_t load_be(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = v << 8 | p[i];
  return v;
}

uint32_t documented_check(const label_bytes& b) {
  label_bytes copy = b;
  std::memset(copy.data() + check_at, 0, 4);
  return core::crc32c({copy.data(), copy.size()});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  label_bytes b{};
  std::memcpy(b.data(), data + 1, std::min<size_t>(size - 1, gga_label_size));
  if ((control & 1u) != 0) {
    std::memcpy(b.data(), "ZCG2", 4);
    b[4] = 1;
  }
  if ((control & 2u) != 0) {
    const uint32_t c = documented_check(b);
    for (int i = 0; i < 4; ++i) b[check_at + i] = uint8_t(c >> (24 - 8 * i));
  }

  gga_label out;
  const gga_label_state state = decode_gga_label(b, out);
  if (std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0; })) {
    check(state == gga_label_state::blank);
    return 0;
  }
  const uint8_t role = b[5], matrix = b[6], missed = b[7];
  const bool valid = std::memcmp(b.data(), "ZCG2", 4) == 0 && b[4] == 1 &&
                     load_be(b.data() + check_at, 4) == documented_check(b) &&
                     role < gga_role_count && matrix <= 1 && load_be(b.data() + 8, 4) != 0 &&
                     load_be(b.data() + 24, 8) != 0 && (missed & ~0b111u) == 0 &&
                     (missed & (1u << (role % 8))) == 0;
  check(state == (valid ? gga_label_state::valid : gga_label_state::foreign));
  if (!valid) return 0;
  check(uint8_t(out.role) == role && out.matrix == matrix && out.missed == missed &&
        out.half == load_be(b.data() + 8, 4) && out.blocks == load_be(b.data() + 16, 8) &&
        out.volume == load_be(b.data() + 24, 8));
  label_bytes again{};
  encode_gga_label(out, again);
  check(again == b);
  return 0;
}
