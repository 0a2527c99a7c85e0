// The NBD wire format byte for byte, against bytes written out by hand from proto.md.
#include "nbd/protocol.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace zc::nbd {
namespace {

std::vector<uint8_t> bytes(std::initializer_list<int> v) {
  std::vector<uint8_t> out;
  for (int b : v) out.push_back(static_cast<uint8_t>(b));
  return out;
}
std::string str(std::initializer_list<int> v) {
  std::string out;
  for (int b : v) out.push_back(static_cast<char>(b));
  return out;
}

TEST(nbd_protocol, greeting_is_nbdmagic_ihaveopt_and_flags) {
  std::string out;
  append_greeting(out, handshake_flag::fixed_newstyle | handshake_flag::no_zeroes);
  EXPECT_EQ(out, std::string("NBDMAGICIHAVEOPT") + str({0, 3}));
}

TEST(nbd_protocol, option_header_decodes_and_bad_magic_is_refused) {
  auto b = bytes({'I', 'H', 'A', 'V', 'E', 'O', 'P', 'T', 0, 0, 0, 7, 0, 0, 1, 2});
  auto h = decode_option_header(std::span<const uint8_t, 16>(b.data(), 16));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->option, 7u);
  EXPECT_EQ(h->length, 0x102u);
  b[0] = 'X';
  EXPECT_FALSE(decode_option_header(std::span<const uint8_t, 16>(b.data(), 16)));
}

TEST(nbd_protocol, request_header_decodes_every_field) {
  auto b = bytes({0x25, 0x60, 0x95, 0x13, 0x00, 0x01, 0x00, 0x01, 1,    2, 3, 4, 5,    6,
                  7,    8,    0,    0,    0,    0,    0,    0,    0x10, 0, 0, 0, 0x20, 0});
  auto h = decode_request(std::span<const uint8_t, 28>(b.data(), 28));
  ASSERT_TRUE(h);
  EXPECT_EQ(h->flags, command_flag::fua);
  EXPECT_EQ(h->type, static_cast<uint16_t>(command::write));
  EXPECT_EQ(h->cookie, 0x0102030405060708u);
  EXPECT_EQ(h->offset, 0x1000u);
  EXPECT_EQ(h->length, 0x2000u);
  b[3] = 0x14;
  EXPECT_FALSE(decode_request(std::span<const uint8_t, 28>(b.data(), 28)));
}

TEST(nbd_protocol, go_request_with_name_and_infos) {
  auto b = bytes({0, 0, 0, 2, 'a', 'b', 0, 2, 0, 3, 0, 1});
  auto g = decode_go(b);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->name, "ab");
  ASSERT_EQ(g->info_count(), 2u);
  EXPECT_EQ(g->info(0), info_type::block_size);
  EXPECT_EQ(g->info(1), info_type::name);
}

TEST(nbd_protocol, go_request_lengths_must_add_up) {
  EXPECT_FALSE(decode_go(bytes({})));
  EXPECT_FALSE(decode_go(bytes({0, 0, 0, 9, 'a', 0, 0})));         // name past the end
  EXPECT_FALSE(decode_go(bytes({0, 0, 0, 1, 'a', 0, 2, 0, 3})));   // one info short
  EXPECT_FALSE(decode_go(bytes({0, 0, 0, 1, 'a', 0, 0, 9})));      // trailing byte
  EXPECT_FALSE(decode_go(bytes({0xff, 0xff, 0xff, 0xff, 0, 0})));  // huge name
  EXPECT_TRUE(decode_go(bytes({0, 0, 0, 0, 0, 0})));               // "" and no infos
}

TEST(nbd_protocol, meta_context_request_with_queries) {
  auto b = bytes({0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 5, 'b', 'a', 's', 'e', ':', 0, 0, 0, 1, 'x'});
  auto m = decode_meta_context(b);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->name, "");
  ASSERT_EQ(m->query_count, 2u);
  EXPECT_EQ(m->query(0), "base:");
  EXPECT_EQ(m->query(1), "x");
  b.pop_back();
  EXPECT_FALSE(decode_meta_context(b));
  // A count far larger than the data is refused without reading past it.
  EXPECT_FALSE(decode_meta_context(bytes({0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff})));
}

TEST(nbd_protocol, option_replies) {
  std::string out;
  append_option_reply(out, 8, reply_type::ack, std::string_view());
  EXPECT_EQ(out,
            str({0, 3, 0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0}));
  out.clear();
  append_option_reply(out, 99, reply_type::err_unsup, std::string_view("no"));
  EXPECT_EQ(out, str({0,  3,    0xe8, 0x89, 0x04, 0x55, 0x65, 0xa9, 0, 0,   0,
                      99, 0x80, 0,    0,    1,    0,    0,    0,    2, 'n', 'o'}));
}

TEST(nbd_protocol, info_replies) {
  std::string out;
  append_info_export(out, 7, 0x100000, 0x05ed);
  EXPECT_EQ(out.substr(20), str({0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0x05, 0xed}));
  EXPECT_EQ(out.substr(12, 8), str({0, 0, 0, 3, 0, 0, 0, 12}));
  out.clear();
  append_info_block_size(out, 7, 4096, 4096, 32u << 20);
  EXPECT_EQ(out.substr(20), str({0, 3, 0, 0, 0x10, 0, 0, 0, 0x10, 0, 0x02, 0, 0, 0}));
}

TEST(nbd_protocol, server_and_meta_context_replies) {
  std::string out;
  append_server_reply(out, 3, "ex");
  EXPECT_EQ(out.substr(12), str({0, 0, 0, 2, 0, 0, 0, 6, 0, 0, 0, 2, 'e', 'x'}));
  out.clear();
  append_meta_context_reply(out, 10, 1, "base:allocation");
  EXPECT_EQ(out.substr(12, 8), str({0, 0, 0, 4, 0, 0, 0, 19}));
  EXPECT_EQ(out.substr(20), str({0, 0, 0, 1}) + "base:allocation");
}

TEST(nbd_protocol, export_name_reply_with_and_without_zeroes) {
  std::string out;
  append_export_name_reply(out, 0x2000, 0x0003, true);
  EXPECT_EQ(out, str({0, 0, 0, 0, 0, 0, 0x20, 0, 0, 3}));
  out.clear();
  append_export_name_reply(out, 0x2000, 0x0003, false);
  EXPECT_EQ(out.size(), 10u + 124u);
  EXPECT_EQ(out.substr(10), std::string(124, '\0'));
}

TEST(nbd_protocol, simple_reply) {
  std::array<uint8_t, 16> b{};
  encode_simple_reply(b, 0x1122334455667788, error_code::einval);
  EXPECT_EQ(
      std::vector<uint8_t>(b.begin(), b.end()),
      bytes({0x67, 0x44, 0x66, 0x98, 0, 0, 0, 22, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}));
}

TEST(nbd_protocol, structured_chunks) {
  std::array<uint8_t, offset_data_header_size> d{};
  encode_offset_data_header(d, 5, 0x3000, 0x1000);
  EXPECT_EQ(std::vector<uint8_t>(d.begin(), d.end()),
            bytes({0x66, 0x8e, 0x33, 0xef, 0,    1, 0, 1, 0, 0, 0, 0, 0,    0,
                   0,    5,    0,    0,    0x10, 8, 0, 0, 0, 0, 0, 0, 0x30, 0}));
  std::array<uint8_t, 20> n{};
  encode_none_chunk(n, 6);
  EXPECT_EQ(std::vector<uint8_t>(n.begin(), n.end()),
            bytes({0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0}));
  std::array<uint8_t, error_chunk_size> e{};
  encode_error_chunk(e, 7, error_code::eio);
  EXPECT_EQ(std::vector<uint8_t>(e.begin(), e.end()),
            bytes({0x66, 0x8e, 0x33, 0xef, 0, 1, 0x80, 1, 0, 0, 0, 0, 0,
                   0,    0,    7,    0,    0, 0, 6,    0, 0, 0, 5, 0, 0}));
  std::array<uint8_t, block_status_chunk_size> s{};
  encode_block_status_chunk(s, 8, 1, 0x10000, 0);
  EXPECT_EQ(std::vector<uint8_t>(s.begin(), s.end()),
            bytes({0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 5, 0, 0, 0, 0, 0, 0, 0, 8,
                   0,    0,    0,    12,   0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0}));
}

TEST(nbd_protocol, names_for_logs) {
  EXPECT_EQ(option_name(7), "NBD_OPT_GO");
  EXPECT_EQ(option_name(1234), "option 1234");
  EXPECT_EQ(command_name(1), "NBD_CMD_WRITE");
  EXPECT_EQ(command_name(99), "unknown command");
}

}  // namespace
}  // namespace zc::nbd
