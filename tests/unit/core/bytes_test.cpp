// Big-endian helpers and the bounds-checked reader/writer that every wire format is built on.
#include "core/bytes.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace zc {
namespace {

TEST(bytes, stores_are_big_endian) {
  uint8_t b[8] = {};
  store_be16(b, 0x1234);
  EXPECT_EQ(b[0], 0x12);
  EXPECT_EQ(b[1], 0x34);
  store_be32(b, 0x01020304u);
  EXPECT_EQ(std::vector<uint8_t>(b, b + 4), (std::vector<uint8_t>{1, 2, 3, 4}));
  store_be64(b, 0x0102030405060708ull);
  EXPECT_EQ(std::vector<uint8_t>(b, b + 8), (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(bytes, loads_read_back_what_stores_wrote) {
  uint8_t b[8] = {};
  const uint64_t values[] = {0, 1, 0x8000000000000000ull, 0xFEDCBA9876543210ull,
                             std::numeric_limits<uint64_t>::max()};
  for (uint64_t v : values) {
    store_be64(b, v);
    EXPECT_EQ(load_be64(b), v);
    store_be32(b, static_cast<uint32_t>(v));
    EXPECT_EQ(load_be32(b), static_cast<uint32_t>(v));
    store_be16(b, static_cast<uint16_t>(v));
    EXPECT_EQ(load_be16(b), static_cast<uint16_t>(v));
  }
}

TEST(bytes, high_bit_bytes_do_not_sign_extend) {
  const uint8_t b[8] = {0xFF, 0xFE, 0xFD, 0xFC, 0xFB, 0xFA, 0xF9, 0xF8};
  EXPECT_EQ(load_be16(b), 0xFFFEu);
  EXPECT_EQ(load_be32(b), 0xFFFEFDFCu);
  EXPECT_EQ(load_be64(b), 0xFFFEFDFCFBFAF9F8ull);
}

TEST(bytes, writer_appends_fields_in_order) {
  std::vector<uint8_t> out = {0xAA};
  byte_writer w(out);
  w.u16(0x0102);
  w.u32(0x03040506u);
  w.u64(0x0708090A0B0C0D0Eull);
  const uint8_t raw[] = {0xF0, 0xF1};
  w.bytes(raw);
  w.bytes({});
  EXPECT_EQ(
      out, (std::vector<uint8_t>{0xAA, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xF0, 0xF1}));
}

TEST(bytes, sized_string_is_a_u32_length_then_the_bytes) {
  std::vector<uint8_t> out;
  byte_writer w(out);
  w.sized_string("abc");
  w.sized_string("");
  EXPECT_EQ(out, (std::vector<uint8_t>{0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0}));
}

TEST(bytes, reader_reads_back_what_the_writer_wrote) {
  std::vector<uint8_t> out;
  byte_writer w(out);
  w.u16(7);
  w.u32(0xDEADBEEFu);
  w.u64(42);
  w.sized_string("hello");
  const uint8_t raw[] = {9, 8, 7};
  w.sized_bytes(raw);

  byte_reader r(out);
  EXPECT_EQ(r.u16(), 7);
  EXPECT_EQ(r.u32(), 0xDEADBEEFu);
  EXPECT_EQ(r.u64(), 42u);
  EXPECT_EQ(r.sized_string(), "hello");
  auto b = r.sized_bytes();
  EXPECT_EQ(std::vector<uint8_t>(b.begin(), b.end()), (std::vector<uint8_t>{9, 8, 7}));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(bytes, short_input_fails_and_later_reads_return_zero) {
  const std::vector<uint8_t> in = {1, 2, 3, 4, 5, 6};
  byte_reader r(in);
  EXPECT_EQ(r.u32(), 0x01020304u);
  EXPECT_EQ(r.u32(), 0u);  // only 2 bytes left
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.remaining(), 0u);
  // Even a read that would fit the leftover bytes fails once the reader has failed.
  EXPECT_EQ(r.u16(), 0u);
  EXPECT_TRUE(r.bytes(1).empty());
  EXPECT_FALSE(r.ok());
}

TEST(bytes, sized_bytes_with_a_length_past_the_end_fails) {
  const std::vector<uint8_t> in = {0, 0, 0, 9, 'a', 'b'};
  byte_reader r(in);
  EXPECT_TRUE(r.sized_bytes().empty());
  EXPECT_FALSE(r.ok());
}

TEST(bytes, huge_declared_length_does_not_wrap_around) {
  const std::vector<uint8_t> in = {0xFF, 0xFF, 0xFF, 0xFF, 'a'};
  byte_reader r(in);
  EXPECT_TRUE(r.sized_string().empty());
  EXPECT_FALSE(r.ok());
  byte_reader r2(in);
  EXPECT_TRUE(r2.bytes(std::numeric_limits<size_t>::max()).empty());
  EXPECT_FALSE(r2.ok());
}

TEST(bytes, reading_zero_bytes_of_an_empty_input_is_fine) {
  byte_reader r(std::span<const uint8_t>{});
  EXPECT_TRUE(r.bytes(0).empty());
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.u16(), 0u);
  EXPECT_FALSE(r.ok());
}

TEST(bytes, every_truncation_of_a_record_is_detected) {
  std::vector<uint8_t> record;
  byte_writer w(record);
  w.u64(1);
  w.sized_string("payload");
  w.u16(2);
  for (size_t n = 0; n < record.size(); ++n) {
    byte_reader r(std::span<const uint8_t>(record.data(), n));
    r.u64();
    r.sized_string();
    r.u16();
    EXPECT_FALSE(r.ok()) << "truncated to " << n << " bytes";
  }
}

}  // namespace
}  // namespace zc
