#include "storage/io_message.hpp"

#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <sstream>
#include <string>

#include "unit/storage/hex.hpp"

namespace zc::storage {
namespace {

using test::hex;

TEST(io_message, is_one_cache_line) {
  EXPECT_EQ(io_message_size, 64u);
}

TEST(io_message, fields_sit_at_the_reference_offsets) {
  std::array<uint8_t, io_message_size> buf{};
  io_message_view m{buf};
  m.set_type(io_message_type::write);
  m.set_user_data(0x0102030405060708ull);
  m.set_result(status::io_failed);
  m.set_io_size(0x11223344u);
  m.set_requester_offset(0xA1A2A3A4A5A6A7A8ull);
  m.set_storage_offset(0xB1B2B3B4B5B6B7B8ull);

  const auto expected =
      hex("00: 00 00 00 02  00 00 00 00  01 02 03 04  05 06 07 08 "
          "10: 00 00 00 11  11 22 33 44  A1 A2 A3 A4  A5 A6 A7 A8 "
          "20: B1 B2 B3 B4  B5 B6 B7 B8  00 00 00 00  00 00 00 00 "
          "30: 00 00 00 00  00 00 00 00  00 00 00 00  00 00 00 00");
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.end()), expected);

  EXPECT_EQ(m.type(), io_message_type::write);
  EXPECT_TRUE(m.is_known_type());
  EXPECT_EQ(m.user_data(), 0x0102030405060708ull);
  EXPECT_EQ(m.result(), status::io_failed);
  EXPECT_EQ(m.io_size(), 0x11223344u);
  EXPECT_EQ(m.requester_offset(), 0xA1A2A3A4A5A6A7A8ull);
  EXPECT_EQ(m.storage_offset(), 0xB1B2B3B4B5B6B7B8ull);
}

TEST(io_message, setters_leave_padding_and_unused_bytes_alone) {
  std::array<uint8_t, io_message_size> buf;
  buf.fill(0xCC);
  io_message_view m{buf.data()};
  m.set_type(io_message_type::read);
  m.set_user_data(0);
  m.set_result(status::success);
  m.set_io_size(0);
  m.set_requester_offset(0);
  m.set_storage_offset(0);
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(buf[i], 0xCC) << i;
  for (size_t i = 40; i < 64; ++i) EXPECT_EQ(buf[i], 0xCC) << i;
  m.clear();
  for (uint8_t b : buf) EXPECT_EQ(b, 0);
}

TEST(io_message, a_response_is_the_request_rewritten_in_place) {
  std::array<uint8_t, io_message_size> buf{};
  io_message_view m{buf};
  m.set_type(io_message_type::read);
  m.set_user_data(7);
  m.set_io_size(4096);
  m.set_requester_offset(0x2000);
  m.set_storage_offset(0x10000);
  const auto request = buf;
  m.set_type(io_message_type::result);
  m.set_result(status::success);
  EXPECT_EQ(m.type(), io_message_type::result);
  for (size_t i = 8; i < 16; ++i) EXPECT_EQ(buf[i], request[i]);
  for (size_t i = 20; i < 64; ++i) EXPECT_EQ(buf[i], request[i]);
}

TEST(io_message, unknown_types_and_results_read_back_raw) {
  auto buf = hex(
      "00 00 00 09 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 63 00 00 00 00 00 00 00 00 00 00"
      " 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
      " 00 00 00 00");
  ASSERT_EQ(buf.size(), io_message_size);
  io_message_view m{buf.data()};
  EXPECT_FALSE(m.is_known_type());
  EXPECT_EQ(static_cast<uint32_t>(m.type()), 9u);
  EXPECT_EQ(static_cast<uint32_t>(m.result()), 99u);
}

// The first ```hex block after "<!-- example: NAME -->" in docs/FORMATS.md.
std::vector<uint8_t> formats_example(const std::string& name) {
  std::ifstream in(std::string(ZC_SOURCE_DIR) + "/docs/FORMATS.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const size_t marker = doc.find("<!-- example: " + name + " -->");
  const size_t open = doc.find("```hex", marker);
  const size_t start = doc.find('\n', open);
  const size_t close = doc.find("```", start);
  if (marker == std::string::npos || open == std::string::npos || close == std::string::npos) {
    ADD_FAILURE() << "docs/FORMATS.md has no hex example " << name;
    return {};
  }
  return hex(std::string_view(doc).substr(start, close - start));
}

std::vector<uint8_t> request(io_message_type type, uint64_t user_data, uint32_t io_size,
                             uint64_t requester_offset, uint64_t storage_offset) {
  std::array<uint8_t, io_message_size> buf{};
  io_message_view m{buf};
  m.set_type(type);
  m.set_user_data(user_data);
  m.set_io_size(io_size);
  m.set_requester_offset(requester_offset);
  m.set_storage_offset(storage_offset);
  return {buf.begin(), buf.end()};
}

// FORMATS §2.1: the worked examples of types 4 to 6, byte for byte.
TEST(io_message, discard_zeroes_and_map_examples_of_the_formats_doc) {
  EXPECT_EQ(formats_example("io_message_discard_request"),
            request(io_message_type::discard, 9, 0x2000, 0, 0x2000));
  EXPECT_EQ(formats_example("io_message_write_zeroes_request"),
            request(io_message_type::write_zeroes, 10, 0x1000, 0, 0x5000));
  EXPECT_EQ(formats_example("io_message_allocation_map_request"),
            request(io_message_type::allocation_map, 11, 2, 0xF000, 0));
  // Blocks 0, 1, 4, 6, 7 of 16: bit i is byte i / 8, bit i % 8, least significant first.
  std::vector<uint8_t> bitmap(2, 0);
  for (unsigned block : {0u, 1u, 4u, 6u, 7u}) bitmap[block / 8] |= uint8_t(1u << (block % 8));
  EXPECT_EQ(formats_example("allocation_map_bitmap"), bitmap);
  EXPECT_EQ(max_allocation_map_size, 4096u);
}

TEST(io_message, zcstore_types_are_known_and_the_next_value_is_not) {
  std::array<uint8_t, io_message_size> buf{};
  io_message_view m{buf.data()};
  m.set_type(io_message_type::flush);
  EXPECT_EQ(buf[3], 3);
  EXPECT_TRUE(m.is_known_type());
  m.set_type(io_message_type::discard);
  EXPECT_EQ(buf[3], 4);
  m.set_type(io_message_type::write_zeroes);
  EXPECT_EQ(buf[3], 5);
  m.set_type(io_message_type::allocation_map);
  EXPECT_EQ(buf[3], 6);
  EXPECT_TRUE(m.is_known_type());
  buf[3] = 7;
  EXPECT_FALSE(m.is_known_type());
}

}  // namespace
}  // namespace zc::storage
