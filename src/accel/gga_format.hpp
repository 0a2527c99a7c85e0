// The gga image format v2 on the three targets (docs/FORMATS.md §4.3): every logical block of B
// bytes is a stripe of three slots, one per target, each a half of H = B/2 bytes and a 16-byte
// entry saying how the block is stored (LZ4 image, or raw for a block that does not compress),
// the crc32c of the plain block and the write's generation. A read accepts two slots only when
// their entries agree (same generation, same crc, same encoding) and the decoded block matches
// the crc; a stripe torn by an interrupted write therefore reads as the whole old or the whole
// new block on every path, never a mix.
//
// Slots on target t (N_t blocks of H bytes) lie one after the other at j * S, S = H + 16; the
// last H-block of each target is kept for the volume label, so a target holds
// n = floor((N_t - 1) * H / S) blocks. Within a slot, data_1 and parity put the entry first and
// data_2 puts it last, so that the service's chunk reads e1|D1|D2|e2|ep|P with the image
// D1|D2 contiguous. Format v1 (the reference's) has no entries and S = H.
// Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "core/status.hpp"

namespace zc::accel {

enum class gga_format : uint8_t { v1 = 1, v2 = 2 };
std::string_view to_string(gga_format f) noexcept;
std::optional<gga_format> parse_gga_format(std::string_view name) noexcept;

inline constexpr uint32_t gga_entry_size = 16;

// Stripe roles, in the reference's target order.
enum class gga_role : uint8_t { data_1 = 0, data_2 = 1, parity = 2 };
inline constexpr uint32_t gga_role_count = 3;

// How a block is stored. none: the slot was never written (an all-zero entry; the block reads
// as zeros).
enum class gga_stored_as : uint8_t { none = 0, lz4 = 1, raw = 2 };

struct gga_entry {
  uint64_t generation = 0;  // never 0 in a written entry
  uint32_t crc = 0;         // crc32c of the plain block (B bytes)
  gga_stored_as stored_as = gga_stored_as::none;
  gga_role role = gga_role::data_1;
  bool operator==(const gga_entry&) const = default;
};

// Bytes 0-7 generation, 8-11 crc (both big-endian), 12 stored_as, 13 role, 14-15 check: the low
// 16 bits of crc32c(bytes 0-13), big-endian.
void encode_gga_entry(const gga_entry& e, std::span<uint8_t, gga_entry_size> out) noexcept;
// success: `out` holds the entry (stored_as none for an all-zero one, which also needs no role).
// invalid_value: a bad check, a stored_as or role out of range, a generation of 0 in a written
// entry, or a role other than `expected` (a slot read from the wrong target).
status decode_gga_entry(std::span<const uint8_t, gga_entry_size> in, gga_role expected,
                        gga_entry& out) noexcept;

// What two decoded entries of one stripe allow.
enum class gga_pair_verdict : uint8_t {
  blank,     // both never written: the block reads as zeros
  lz4,       // same write, LZ4 image: decode, then check the crc
  raw,       // same write, stored raw: copy, then check the crc
  mismatch,  // not the same write (or one blank): this pair cannot give the block
};
gga_pair_verdict judge_gga_pair(const gga_entry& a, const gga_entry& b) noexcept;

// The volume label (v2) at the start of the last H-block of each target: which volume the target
// belongs to and which half of every block it holds, so that a service given the targets in
// another order, another volume's target or the other EC matrix refuses to start, and a blank
// target is known for a replacement; and which other targets missed writes (were lost while
// writes went on, or are being rebuilt), so that a target that comes back stale is rebuilt.
// 32 bytes, big-endian: "ZCG2", version 1, role, matrix (0 vandermonde, 1 cauchy), missed (bit
// per role, never the label's own); H (u32); crc32c of the 32 bytes with this field 0 (u32);
// blocks n (u64); volume id (u64, never 0).
inline constexpr uint32_t gga_label_size = 32;

struct gga_label {
  gga_role role = gga_role::data_1;
  uint8_t matrix = 0;  // ec_matrix's value
  uint32_t half = 0;
  uint64_t blocks = 0;
  uint64_t volume = 0;
  // The other targets (bit per gga_role) that lack writes this one holds: rebuild them.
  uint8_t missed = 0;
  bool operator==(const gga_label&) const = default;
};

enum class gga_label_state : uint8_t {
  blank,    // all zero: never labelled (a new volume, or a blank replacement)
  valid,    // a label, decoded
  foreign,  // something else: not a v2 gga target (v1 images, another store's data, damage)
};

void encode_gga_label(const gga_label& l, std::span<uint8_t, gga_label_size> out) noexcept;
gga_label_state decode_gga_label(std::span<const uint8_t, gga_label_size> in,
                                 gga_label& out) noexcept;

// The per-target arithmetic of one format.
struct gga_slot_layout {
  uint32_t half = 0;   // H
  uint32_t entry = 0;  // 0 (v1) or gga_entry_size (v2)

  static gga_slot_layout of(gga_format f, uint32_t half) noexcept {
    return {half, f == gga_format::v2 ? gga_entry_size : 0};
  }
  uint32_t slot() const noexcept { return half + entry; }
  // Offsets inside a slot.
  uint32_t entry_at(gga_role r) const noexcept { return r == gga_role::data_2 ? half : 0; }
  uint32_t half_at(gga_role r) const noexcept { return r == gga_role::data_2 ? 0 : entry; }
  // Logical blocks a target of `target_blocks` H-blocks holds (0 when it is too small).
  uint64_t blocks_in(uint64_t target_blocks) const noexcept;
  // H-blocks a target needs for `blocks` logical blocks (the label block included in v2).
  uint64_t target_blocks_for(uint64_t blocks) const noexcept;
  // Byte offset of the label on a target of `target_blocks` H-blocks (v2).
  uint64_t label_at(uint64_t target_blocks) const noexcept {
    return target_blocks == 0 ? 0 : (target_blocks - 1) * half;
  }
};

}  // namespace zc::accel
