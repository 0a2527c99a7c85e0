#include "accel/gga_format.hpp"

#include <cstring>

#include "core/bytes.hpp"
#include "core/crc32c.hpp"

namespace zc::accel {
namespace {
constexpr size_t checked_bytes = 14;

uint16_t entry_check(const uint8_t* p) noexcept {
  return static_cast<uint16_t>(core::crc32c({p, checked_bytes}) & 0xFFFFu);
}
}  // namespace

std::string_view to_string(gga_format f) noexcept {
  return f == gga_format::v1 ? "v1" : "v2";
}

std::optional<gga_format> parse_gga_format(std::string_view name) noexcept {
  if (name == "v1") return gga_format::v1;
  if (name == "v2") return gga_format::v2;
  return std::nullopt;
}

void encode_gga_entry(const gga_entry& e, std::span<uint8_t, gga_entry_size> out) noexcept {
  uint8_t* p = out.data();
  store_be64(p, e.generation);
  store_be32(p + 8, e.crc);
  p[12] = static_cast<uint8_t>(e.stored_as);
  p[13] = static_cast<uint8_t>(e.role);
  store_be16(p + 14, entry_check(p));
}

status decode_gga_entry(std::span<const uint8_t, gga_entry_size> in, gga_role expected,
                        gga_entry& out) noexcept {
  const uint8_t* p = in.data();
  static constexpr uint8_t blank[gga_entry_size] = {};
  if (std::memcmp(p, blank, gga_entry_size) == 0) {
    out = gga_entry{.role = expected};
    return status::success;
  }
  if (load_be16(p + 14) != entry_check(p)) return status::invalid_value;
  const uint8_t stored_as = p[12], role = p[13];
  if (stored_as != uint8_t(gga_stored_as::lz4) && stored_as != uint8_t(gga_stored_as::raw))
    return status::invalid_value;
  if (role != uint8_t(expected)) return status::invalid_value;
  const uint64_t generation = load_be64(p);
  if (generation == 0) return status::invalid_value;
  out = gga_entry{generation, load_be32(p + 8), gga_stored_as(stored_as), gga_role(role)};
  return status::success;
}

gga_pair_verdict judge_gga_pair(const gga_entry& a, const gga_entry& b) noexcept {
  const bool a_blank = a.stored_as == gga_stored_as::none;
  const bool b_blank = b.stored_as == gga_stored_as::none;
  if (a_blank || b_blank)
    return a_blank && b_blank ? gga_pair_verdict::blank : gga_pair_verdict::mismatch;
  if (a.generation != b.generation || a.crc != b.crc || a.stored_as != b.stored_as)
    return gga_pair_verdict::mismatch;
  return a.stored_as == gga_stored_as::lz4 ? gga_pair_verdict::lz4 : gga_pair_verdict::raw;
}

namespace {
constexpr uint8_t label_magic[4] = {'Z', 'C', 'G', '2'};
constexpr uint8_t label_version = 1;
constexpr size_t label_crc_at = 12;

uint32_t label_crc(const uint8_t* p) noexcept {
  uint8_t copy[gga_label_size];
  std::memcpy(copy, p, gga_label_size);
  std::memset(copy + label_crc_at, 0, 4);
  return core::crc32c({copy, gga_label_size});
}
}  // namespace

void encode_gga_label(const gga_label& l, std::span<uint8_t, gga_label_size> out) noexcept {
  uint8_t* p = out.data();
  std::memcpy(p, label_magic, 4);
  p[4] = label_version;
  p[5] = static_cast<uint8_t>(l.role);
  p[6] = l.matrix;
  p[7] = l.missed;
  store_be32(p + 8, l.half);
  store_be32(p + label_crc_at, 0);
  store_be64(p + 16, l.blocks);
  store_be64(p + 24, l.volume);
  store_be32(p + label_crc_at, label_crc(p));
}

gga_label_state decode_gga_label(std::span<const uint8_t, gga_label_size> in,
                                 gga_label& out) noexcept {
  const uint8_t* p = in.data();
  static constexpr uint8_t blank[gga_label_size] = {};
  if (std::memcmp(p, blank, gga_label_size) == 0) return gga_label_state::blank;
  if (std::memcmp(p, label_magic, 4) != 0 || p[4] != label_version ||
      load_be32(p + label_crc_at) != label_crc(p) || p[5] >= gga_role_count || p[6] > 1)
    return gga_label_state::foreign;
  const gga_label l{gga_role(p[5]),    p[6], load_be32(p + 8), load_be64(p + 16),
                    load_be64(p + 24), p[7]};
  // Missed: roles only, and never the label's own (a target cannot lack its own writes).
  const uint8_t roles = (1u << gga_role_count) - 1;
  if (l.half == 0 || l.volume == 0 || (l.missed & ~roles) != 0 || (l.missed & (1u << p[5])) != 0)
    return gga_label_state::foreign;
  out = l;
  return gga_label_state::valid;
}

uint64_t gga_slot_layout::blocks_in(uint64_t target_blocks) const noexcept {
  if (half == 0) return 0;
  if (entry == 0) return target_blocks;
  if (target_blocks < 2) return 0;
  // (N_t - 1) * H / S without overflow: N_t < 2^64 / 2^31 is not guaranteed, so divide first.
  const uint64_t usable = target_blocks - 1;
  const uint64_t s = slot();
  return usable / s * half + (usable % s) * half / s;
}

uint64_t gga_slot_layout::target_blocks_for(uint64_t blocks) const noexcept {
  if (entry == 0 || half == 0) return blocks;
  const uint64_t s = slot();
  // ceil(blocks * S / H) + 1, split as above.
  const uint64_t whole = blocks / half * s;
  const uint64_t rest = (blocks % half) * s;
  return whole + (rest + half - 1) / half + 1;
}

}  // namespace zc::accel
