// The gga image format v2 codec (accel/gga_format.*, docs/FORMATS.md §4.3) and core::crc32c it
// rests on, checked against values computed here without the code under test: a bitwise CRC-32C,
// entries laid out by hand, and the slot arithmetic in 128-bit integers.
#include <gtest/gtest.h>
#include <isa-l/crc.h>
#include <sys/mman.h>

#include <array>
#include <climits>
#include <cstring>
#include <string_view>
#include <vector>

#include "accel/gga_format.hpp"
#include "core/crc32c.hpp"
#include "unit/accel/accel_test_support.hpp"

namespace zc::accel {
namespace {

using gga_entry_bytes = std::array<uint8_t, gga_entry_size>;

// CRC-32C one bit at a time: reflected polynomial 0x82F63B78, initial value and final xor ~0.
uint32_t bitwise_crc32c(std::span<const uint8_t> data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t byte : data) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) != 0 ? 0x82F63B78u : 0u);
  }
  return ~crc;
}

std::span<const uint8_t> bytes_of(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

// The 16 bytes of an entry written out field by field (docs/FORMATS.md §4.3).
gga_entry_bytes entry_by_hand(uint64_t generation, uint32_t crc, uint8_t stored_as, uint8_t role) {
  gga_entry_bytes b{};
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(generation >> (56 - 8 * i));
  for (int i = 0; i < 4; ++i) b[size_t(8 + i)] = uint8_t(crc >> (24 - 8 * i));
  b[12] = stored_as;
  b[13] = role;
  const uint32_t check = bitwise_crc32c({b.data(), 14});
  b[14] = uint8_t(check >> 8);
  b[15] = uint8_t(check);
  return b;
}

gga_entry_bytes encoded(const gga_entry& e) {
  gga_entry_bytes b{};
  encode_gga_entry(e, b);
  return b;
}

status decode(const gga_entry_bytes& b, gga_role expected, gga_entry& out) {
  return decode_gga_entry(std::span<const uint8_t, gga_entry_size>(b), expected, out);
}

constexpr gga_role all_roles[] = {gga_role::data_1, gga_role::data_2, gga_role::parity};

TEST(core_crc32c, check_value_and_empty_input) {
  EXPECT_EQ(core::crc32c(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(bitwise_crc32c(bytes_of("123456789")), 0xE3069283u);
  EXPECT_EQ(core::crc32c({}), 0u);
}

TEST(core_crc32c, matches_the_bitwise_crc_at_every_length_and_alignment) {
  const auto data = test::random_bytes(300, 7);
  for (size_t start = 0; start < 8; ++start)
    for (size_t n = 0; start + n <= data.size(); ++n)
      ASSERT_EQ(core::crc32c({data.data() + start, n}), bitwise_crc32c({data.data() + start, n}))
          << "start " << start << " length " << n;
}

// A span over INT_MAX bytes goes to ISA-L in pieces; the result must be that of the whole span,
// here computed by chaining ISA-L over pieces cut elsewhere. The span is untouched anonymous
// memory (the shared zero page) with a few bytes written at both ends, so it costs no RAM.
TEST(core_crc32c, span_over_int_max_is_the_crc_of_the_whole_span) {
  const size_t size = size_t(INT_MAX) + 3;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(p);
  std::memcpy(bytes, "head", 4);
  std::memcpy(bytes + size - 4, "tail", 4);
  uint32_t chained = 0xFFFFFFFFu;
  constexpr size_t piece = size_t(1) << 30;
  for (size_t at = 0; at < size; at += piece) {
    const size_t n = std::min(piece, size - at);
    chained = crc32_iscsi(bytes + at, static_cast<int>(n), chained);
  }
  EXPECT_EQ(core::crc32c({bytes, size}), ~chained);
  ::munmap(p, size);
}

TEST(gga_entry_codec, every_stored_as_and_role_round_trips_in_the_documented_bytes) {
  for (gga_stored_as how : {gga_stored_as::lz4, gga_stored_as::raw}) {
    for (gga_role role : all_roles) {
      SCOPED_TRACE(testing::Message() << "stored_as " << int(how) << " role " << int(role));
      const gga_entry e{0x0102030405060708ull, 0xA1B2C3D4u, how, role};
      const auto b = encoded(e);
      EXPECT_EQ(b, entry_by_hand(0x0102030405060708ull, 0xA1B2C3D4u, uint8_t(how), uint8_t(role)));
      gga_entry back;
      ASSERT_EQ(decode(b, role, back), status::success);
      EXPECT_EQ(back, e);
    }
  }
}

TEST(gga_entry_codec, extreme_generations_and_crcs_round_trip) {
  for (uint64_t generation : {uint64_t(1), ~uint64_t(0), uint64_t(1) << 63}) {
    for (uint32_t crc : {0u, ~0u}) {
      const gga_entry e{generation, crc, gga_stored_as::raw, gga_role::parity};
      gga_entry back;
      ASSERT_EQ(decode(encoded(e), gga_role::parity, back), status::success);
      EXPECT_EQ(back, e);
    }
  }
}

TEST(gga_entry_codec, all_zero_entry_is_a_never_written_slot) {
  const gga_entry_bytes zero{};
  for (gga_role role : all_roles) {
    gga_entry out{7, 7, gga_stored_as::lz4, gga_role::data_1};
    ASSERT_EQ(decode(zero, role, out), status::success);
    EXPECT_EQ(out.stored_as, gga_stored_as::none);
    EXPECT_EQ(out.generation, 0u);
    EXPECT_EQ(out.crc, 0u);
    EXPECT_EQ(out.role, role);
  }
}

// Every single-bit flip is refused: in bytes 0-13 the check no longer matches (CRC-32C's low 16
// bits change for every single-bit error in 14 bytes), in bytes 14-15 the check itself is wrong.
TEST(gga_entry_codec, every_single_bit_flip_is_refused) {
  const auto good =
      encoded({0x0000000100000002ull, 0x71A92EA3u, gga_stored_as::lz4, gga_role::data_1});
  for (size_t bit = 0; bit < gga_entry_size * 8; ++bit) {
    auto b = good;
    b[bit / 8] ^= uint8_t(1u << (bit % 8));
    gga_entry out;
    EXPECT_EQ(decode(b, gga_role::data_1, out), status::invalid_value) << "bit " << bit;
  }
}

TEST(gga_entry_codec, a_slot_of_another_role_is_refused) {
  for (gga_role written : all_roles) {
    const auto b = encoded({5, 6, gga_stored_as::lz4, written});
    for (gga_role expected : all_roles) {
      gga_entry out;
      EXPECT_EQ(decode(b, expected, out),
                written == expected ? status::success : status::invalid_value)
          << "written " << int(written) << " expected " << int(expected);
    }
  }
}

TEST(gga_entry_codec, out_of_range_fields_with_a_valid_check_are_refused) {
  gga_entry out;
  // stored_as none (0) in a written entry, and 3 and 255: not a storage the format knows.
  for (uint8_t how : {0, 3, 255}) {
    const auto b = entry_by_hand(1, 2, how, uint8_t(gga_role::data_2));
    EXPECT_EQ(decode(b, gga_role::data_2, out), status::invalid_value) << "stored_as " << int(how);
  }
  // A role out of range refuses whatever the reader expected.
  for (gga_role expected : all_roles)
    EXPECT_EQ(decode(entry_by_hand(1, 2, uint8_t(gga_stored_as::lz4), 3), expected, out),
              status::invalid_value);
  // Generation 0 is never written.
  for (uint8_t how : {uint8_t(gga_stored_as::lz4), uint8_t(gga_stored_as::raw)})
    EXPECT_EQ(decode(entry_by_hand(0, 2, how, uint8_t(gga_role::parity)), gga_role::parity, out),
              status::invalid_value);
  // The control: the same bytes with sane fields decode.
  EXPECT_EQ(decode(entry_by_hand(1, 2, uint8_t(gga_stored_as::raw), uint8_t(gga_role::parity)),
                   gga_role::parity, out),
            status::success);
}

TEST(gga_entry_codec, the_check_is_big_endian) {
  const auto b = encoded({9, 10, gga_stored_as::raw, gga_role::data_2});
  const uint32_t check = bitwise_crc32c({b.data(), 14}) & 0xFFFFu;
  EXPECT_EQ(b[14], uint8_t(check >> 8));
  EXPECT_EQ(b[15], uint8_t(check));
  auto swapped = b;
  std::swap(swapped[14], swapped[15]);
  ASSERT_NE(swapped, b);
  gga_entry out;
  EXPECT_EQ(decode(swapped, gga_role::data_2, out), status::invalid_value);
}

TEST(gga_pair_judge, every_verdict) {
  const gga_entry blank_1{.role = gga_role::data_1};
  const gga_entry blank_p{.role = gga_role::parity};
  const gga_entry lz4_1{3, 0xCAFE, gga_stored_as::lz4, gga_role::data_1};
  const gga_entry lz4_2{3, 0xCAFE, gga_stored_as::lz4, gga_role::data_2};
  const gga_entry raw_2{3, 0xCAFE, gga_stored_as::raw, gga_role::data_2};
  const gga_entry raw_p{3, 0xCAFE, gga_stored_as::raw, gga_role::parity};
  EXPECT_EQ(judge_gga_pair(blank_1, blank_p), gga_pair_verdict::blank);
  EXPECT_EQ(judge_gga_pair(lz4_1, lz4_2), gga_pair_verdict::lz4);
  EXPECT_EQ(judge_gga_pair(lz4_2, lz4_1), gga_pair_verdict::lz4);
  EXPECT_EQ(judge_gga_pair(raw_2, raw_p), gga_pair_verdict::raw);
  // One blank, one written: a torn first write.
  EXPECT_EQ(judge_gga_pair(blank_1, lz4_2), gga_pair_verdict::mismatch);
  EXPECT_EQ(judge_gga_pair(raw_p, blank_1), gga_pair_verdict::mismatch);
  // Written by different writes: each field on its own makes the difference.
  gga_entry other = lz4_2;
  other.generation = 4;
  EXPECT_EQ(judge_gga_pair(lz4_1, other), gga_pair_verdict::mismatch);
  other = lz4_2;
  other.crc ^= 1;
  EXPECT_EQ(judge_gga_pair(lz4_1, other), gga_pair_verdict::mismatch);
  EXPECT_EQ(judge_gga_pair(lz4_1, raw_2), gga_pair_verdict::mismatch);
  EXPECT_EQ(judge_gga_pair(raw_p, lz4_1), gga_pair_verdict::mismatch);
}

TEST(gga_slot_layout_math, offsets_inside_a_slot_per_role) {
  const auto v2 = gga_slot_layout::of(gga_format::v2, 32);
  EXPECT_EQ(v2.slot(), 48u);
  EXPECT_EQ(v2.entry_at(gga_role::data_1), 0u);
  EXPECT_EQ(v2.half_at(gga_role::data_1), 16u);
  EXPECT_EQ(v2.entry_at(gga_role::data_2), 32u);
  EXPECT_EQ(v2.half_at(gga_role::data_2), 0u);
  EXPECT_EQ(v2.entry_at(gga_role::parity), 0u);
  EXPECT_EQ(v2.half_at(gga_role::parity), 16u);
  const auto v1 = gga_slot_layout::of(gga_format::v1, 32);
  EXPECT_EQ(v1.entry, 0u);
  EXPECT_EQ(v1.slot(), 32u);
  for (gga_role r : all_roles) EXPECT_EQ(v1.half_at(r), 0u);
}

TEST(gga_slot_layout_math, capacity_of_small_targets_by_hand) {
  const auto v2 = gga_slot_layout::of(gga_format::v2, 32);  // S = 48
  EXPECT_EQ(v2.blocks_in(0), 0u);
  EXPECT_EQ(v2.blocks_in(1), 0u);  // the label block only
  EXPECT_EQ(v2.blocks_in(2), 0u);  // 32 bytes of slots: less than one
  EXPECT_EQ(v2.blocks_in(3), 1u);  // 64
  EXPECT_EQ(v2.blocks_in(4), 2u);  // 96
  EXPECT_EQ(v2.blocks_in(7), 4u);  // 192
  EXPECT_EQ(v2.target_blocks_for(0), 1u);
  EXPECT_EQ(v2.target_blocks_for(1), 3u);  // 48 bytes: 2 blocks, then the label
  EXPECT_EQ(v2.target_blocks_for(2), 4u);  // 96: 3
  EXPECT_EQ(v2.target_blocks_for(3), 6u);  // 144: 5
  const auto h4k = gga_slot_layout::of(gga_format::v2, 4096);
  // S = 4112: 256 * 4112 = 257 * 4096 exactly; 257 * 4112 = 258 * 4096 + 16.
  EXPECT_EQ(h4k.target_blocks_for(256), 258u);
  EXPECT_EQ(h4k.target_blocks_for(257), 260u);
  EXPECT_EQ(h4k.blocks_in(258), 256u);
  EXPECT_EQ(h4k.blocks_in(259), 256u);
  EXPECT_EQ(h4k.blocks_in(260), 257u);
  const auto v1 = gga_slot_layout::of(gga_format::v1, 32);
  for (uint64_t n : {0ull, 1ull, 2ull, 1000ull, 1ull << 40}) {
    EXPECT_EQ(v1.blocks_in(n), n);
    EXPECT_EQ(v1.target_blocks_for(n), n);
  }
}

using u128 = unsigned __int128;

// floor((N_t - 1) * H / S) and ceil(n * S / H) + 1 without any overflow.
uint64_t wide_blocks_in(uint64_t target_blocks, uint32_t half) {
  if (target_blocks == 0) return 0;
  return uint64_t(u128(target_blocks - 1) * half / (half + gga_entry_size));
}
uint64_t wide_target_blocks_for(uint64_t blocks, uint32_t half) {
  const u128 bytes = u128(blocks) * (half + gga_entry_size);
  return uint64_t((bytes + half - 1) / half + 1);
}

TEST(gga_slot_layout_math, target_blocks_for_is_the_smallest_target_that_holds_n) {
  for (uint32_t half : {32u, 64u, 96u, 2048u, 4096u, 4104u, 32768u, 1u << 20, 1u << 31}) {
    const auto v2 = gga_slot_layout::of(gga_format::v2, half);
    for (uint64_t n = 0; n < 3000; ++n) {
      const uint64_t t = v2.target_blocks_for(n);
      ASSERT_EQ(t, wide_target_blocks_for(n, half)) << "H " << half << " n " << n;
      ASSERT_GE(v2.blocks_in(t), n) << "H " << half << " n " << n;
      if (n > 0) {
        ASSERT_LT(v2.blocks_in(t - 1), n) << "H " << half << " n " << n;
      }
    }
  }
}

TEST(gga_slot_layout_math, large_targets_do_not_overflow) {
  for (uint32_t half : {1u << 30, 1u << 31, 4096u}) {
    const auto v2 = gga_slot_layout::of(gga_format::v2, half);
    for (uint64_t t : {(uint64_t(1) << 40) - 1, uint64_t(1) << 40, (uint64_t(1) << 40) + 12345,
                       uint64_t(1) << 62, ~uint64_t(0)}) {
      EXPECT_EQ(v2.blocks_in(t), wide_blocks_in(t, half)) << "H " << half << " N_t " << t;
    }
    // n whose n * S overflows 64 bits while the answer fits.
    for (uint64_t n : {(uint64_t(1) << 40) - 3, uint64_t(1) << 40, (uint64_t(1) << 50) + 7}) {
      const uint64_t t = v2.target_blocks_for(n);
      EXPECT_EQ(t, wide_target_blocks_for(n, half)) << "H " << half << " n " << n;
      EXPECT_GE(v2.blocks_in(t), n);
      EXPECT_LT(v2.blocks_in(t - 1), n);
    }
  }
}

}  // namespace
}  // namespace zc::accel

namespace zc::accel {
namespace {

TEST(gga_label_codec, round_trips_and_blank_is_blank) {
  const gga_label l{gga_role::parity, 1, 4096, 62, 0x0123456789ABCDEFull};
  std::array<uint8_t, gga_label_size> bytes{};
  encode_gga_label(l, bytes);
  EXPECT_EQ(bytes[0], 'Z');
  EXPECT_EQ(bytes[3], '2');
  EXPECT_EQ(bytes[5], 2);
  EXPECT_EQ(bytes[6], 1);
  gga_label back;
  ASSERT_EQ(decode_gga_label(bytes, back), gga_label_state::valid);
  EXPECT_EQ(back, l);
  const std::array<uint8_t, gga_label_size> zeros{};
  EXPECT_EQ(decode_gga_label(zeros, back), gga_label_state::blank);
}

TEST(gga_label_codec, anything_but_a_good_label_is_foreign) {
  const gga_label l{gga_role::data_2, 0, 32, 2, 7};
  std::array<uint8_t, gga_label_size> good{};
  encode_gga_label(l, good);
  gga_label out;
  // Every single-bit flip: the check catches it.
  for (size_t bit = 0; bit < gga_label_size * 8; ++bit) {
    auto b = good;
    b[bit / 8] = static_cast<uint8_t>(b[bit / 8] ^ (1u << (bit % 8)));
    EXPECT_EQ(decode_gga_label(b, out), gga_label_state::foreign) << bit;
  }
  // Fields out of range with a good check.
  for (const gga_label& bad : {gga_label{gga_role(3), 0, 32, 2, 7}, gga_label{l.role, 2, 32, 2, 7},
                               gga_label{l.role, 0, 0, 2, 7}, gga_label{l.role, 0, 32, 2, 0}}) {
    std::array<uint8_t, gga_label_size> b{};
    encode_gga_label(bad, b);
    EXPECT_EQ(decode_gga_label(b, out), gga_label_state::foreign);
  }
  // Another store's bytes (a v1 image's block).
  std::array<uint8_t, gga_label_size> text{};
  std::memcpy(text.data(), "block storage line 1 of the gga", 31);
  EXPECT_EQ(decode_gga_label(text, out), gga_label_state::foreign);
}

// Byte 7 names the other targets that missed writes (FORMATS.md §4.3): any of them round-trips;
// the label's own role, or a bit past the three roles, makes it foreign even with a good check.
TEST(gga_label_codec, missed_names_other_roles_only) {
  for (uint8_t missed : {0b000, 0b010, 0b100, 0b110}) {
    const gga_label l{gga_role::data_1, 0, 32, 2, 7, static_cast<uint8_t>(missed)};
    std::array<uint8_t, gga_label_size> bytes{};
    encode_gga_label(l, bytes);
    EXPECT_EQ(bytes[7], missed);
    gga_label back;
    ASSERT_EQ(decode_gga_label(bytes, back), gga_label_state::valid) << int(missed);
    EXPECT_EQ(back, l);
  }
  for (const gga_label& bad : {gga_label{gga_role::data_1, 0, 32, 2, 7, 0b001},
                               gga_label{gga_role::parity, 0, 32, 2, 7, 0b101},
                               gga_label{gga_role::data_2, 0, 32, 2, 7, 0b1000}}) {
    std::array<uint8_t, gga_label_size> bytes{};
    encode_gga_label(bad, bytes);
    gga_label out;
    EXPECT_EQ(decode_gga_label(bytes, out), gga_label_state::foreign) << int(bad.missed);
  }
}

TEST(gga_label_codec, label_is_at_the_start_of_the_last_block) {
  const auto v2 = gga_slot_layout::of(gga_format::v2, 4096);
  EXPECT_EQ(v2.label_at(66), 65u * 4096);
  EXPECT_EQ(v2.label_at(0), 0u);
}

}  // namespace
}  // namespace zc::accel
