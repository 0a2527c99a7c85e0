// libFuzzer harness for the gga format v2 block entry (docs/FORMATS.md §4.3) as read from two
// targets: decode_gga_entry on each, then judge_gga_pair on the two decoded entries. Input: byte
// 0 picks the roles the reader expects (bits 0-1 and 2-3, modulo 3) and whether the harness
// first gives each entry a valid check (bit 7, so that the fuzzer reaches the field rules past
// the 16-bit check); then the two 16-byte entries (missing bytes read as zero). The document's
// rules are the oracle: an all-zero entry is blank; any other decodes exactly when its check
// matches, stored_as is 1 or 2, the role is the expected one and the generation is not 0, and
// then encodes back to the same bytes. The verdict is symmetric and follows §4.3's read rule.
// Any crash, sanitizer report or abort is a finding.
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

using entry_bytes = std::array<uint8_t, gga_entry_size>;
constexpr size_t checked_bytes = 14;
constexpr uint8_t repair_checks = 0x80;

uint16_t documented_check(const entry_bytes& b) {
  return static_cast<uint16_t>(core::crc32c({b.data(), checked_bytes}) & 0xFFFFu);
}

uint64_t load_be(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = v << 8 | p[i];
  return v;
}

// Decodes one entry and checks the result against the documented rules.
bool decode_checked(const entry_bytes& b, gga_role expected, gga_entry& out) {
  const bool ok = decode_gga_entry(b, expected, out) == status::success;
  const bool zero = std::all_of(b.begin(), b.end(), [](uint8_t x) { return x == 0; });
  if (zero) {
    check(ok && out.stored_as == gga_stored_as::none && out.role == expected);
    return ok;
  }
  const uint8_t stored_as = b[12], role = b[13];
  const bool valid = load_be(b.data() + 14, 2) == documented_check(b) &&
                     (stored_as == 1 || stored_as == 2) && role == uint8_t(expected) &&
                     load_be(b.data(), 8) != 0;
  check(ok == valid);
  if (!ok) return false;
  check(out.generation == load_be(b.data(), 8) && out.crc == load_be(b.data() + 8, 4) &&
        uint8_t(out.stored_as) == stored_as && out.role == expected);
  entry_bytes again{};
  encode_gga_entry(out, again);
  check(again == b);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const auto role_a = gga_role((control & 3u) % gga_role_count);
  const auto role_b = gga_role(((control >> 2) & 3u) % gga_role_count);
  entry_bytes a{}, b{};
  const size_t rest = size - 1;
  std::memcpy(a.data(), data + 1, std::min<size_t>(rest, gga_entry_size));
  if (rest > gga_entry_size)
    std::memcpy(b.data(), data + 1 + gga_entry_size,
                std::min<size_t>(rest - gga_entry_size, gga_entry_size));
  if ((control & repair_checks) != 0) {
    for (auto* e : {&a, &b}) {
      const uint16_t c = documented_check(*e);
      (*e)[14] = uint8_t(c >> 8);
      (*e)[15] = uint8_t(c);
    }
  }

  gga_entry ea, eb;
  if (!decode_checked(a, role_a, ea) || !decode_checked(b, role_b, eb)) return 0;
  const gga_pair_verdict verdict = judge_gga_pair(ea, eb);
  check(verdict == judge_gga_pair(eb, ea));
  const bool blank_a = ea.stored_as == gga_stored_as::none;
  const bool blank_b = eb.stored_as == gga_stored_as::none;
  gga_pair_verdict expected = gga_pair_verdict::mismatch;
  if (blank_a && blank_b) {
    expected = gga_pair_verdict::blank;
  } else if (!blank_a && !blank_b && ea.generation == eb.generation && ea.crc == eb.crc &&
             ea.stored_as == eb.stored_as) {
    expected = ea.stored_as == gga_stored_as::lz4 ? gga_pair_verdict::lz4 : gga_pair_verdict::raw;
  }
  check(verdict == expected);
  return 0;
}
