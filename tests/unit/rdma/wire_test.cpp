// docs/FORMATS.md §8 byte by byte: every field of the rdma message header at its documented
// offset and width (little-endian), and every op's header length as the document's table gives
// it, not as the code computes it.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "rdma/internal/wire.hpp"

namespace zc::rdma::internal {
namespace {

// FORMATS §8, "Header length by op".
struct op_length {
  op code;
  size_t length;
};
constexpr op_length documented_lengths[] = {
    {op::send, 28},       {op::write, 88},  {op::read, 88},
    {op::read_reply, 40}, {op::atomic, 88}, {op::ack_sends, 28},
    {op::nack_send, 32},  {op::ack_op, 80}, {op::disconnect, 28},
};

uint64_t read_le(const uint8_t* p, size_t width) {
  uint64_t v = 0;
  for (size_t i = width; i-- > 0;) v = v << 8 | p[i];
  return v;
}

TEST(wire_header, every_field_sits_at_its_documented_offset_and_width) {
  wire_header h{};
  h.dst_context = 0x01020304;
  h.dst_nonce = 0x05060708;
  h.src_nonce = 0x090A0B0C;
  h.code = op::ack_op;
  h.flags = 0x0D0E;
  h.seq = 0x11121314;
  h.acked = 0x15161718;
  h.immediate = 0x191A1B1C;
  h.status = 0x1D1E1F20;
  h.id = 0x2122232425262728;
  h.export_key = 0x292A2B2C2D2E2F30;
  h.export_id = 0x3132333435363738;
  h.offset = 0x393A3B3C3D3E3F40;
  h.length = 0x4142434445464748;
  h.operand0 = 0x494A4B4C4D4E4F50;
  h.operand1 = 0x5152535455565758;
  std::vector<uint8_t> bytes(88);
  ASSERT_EQ(sizeof(h), bytes.size());
  std::memcpy(bytes.data(), &h, sizeof(h));
  struct field {
    const char* name;
    size_t offset;
    size_t width;
    uint64_t value;
  };
  const field documented[] = {
      {"dst_context", 0, 4, 0x01020304},
      {"dst_nonce", 4, 4, 0x05060708},
      {"src_nonce", 8, 4, 0x090A0B0C},
      {"op", 12, 2, 8},
      {"flags", 14, 2, 0x0D0E},
      {"seq", 16, 4, 0x11121314},
      {"acked", 20, 4, 0x15161718},
      {"immediate", 24, 4, 0x191A1B1C},
      {"status", 28, 4, 0x1D1E1F20},
      {"id", 32, 8, 0x2122232425262728},
      {"export_key", 40, 8, 0x292A2B2C2D2E2F30},
      {"export_id", 48, 8, 0x3132333435363738},
      {"offset", 56, 8, 0x393A3B3C3D3E3F40},
      {"length", 64, 8, 0x4142434445464748},
      {"operand0", 72, 8, 0x494A4B4C4D4E4F50},
      {"operand1", 80, 8, 0x5152535455565758},
  };
  size_t next = 0;
  for (const auto& f : documented) {
    EXPECT_EQ(f.offset, next) << f.name << ": the table leaves a gap or an overlap";
    EXPECT_EQ(read_le(bytes.data() + f.offset, f.width), f.value) << f.name;
    next = f.offset + f.width;
  }
  EXPECT_EQ(next, bytes.size());
  // The flag bits the document lists.
  EXPECT_EQ(has_immediate, 1 << 0);
  EXPECT_EQ(atomic_fetch_add, 1 << 1);
  EXPECT_EQ(atomic_set, 1 << 2);
  EXPECT_EQ(has_ack, 1 << 3);
}

TEST(wire_header, each_op_needs_exactly_its_documented_header_length) {
  for (const auto& d : documented_lengths) {
    EXPECT_EQ(header_size_for(d.code), d.length) << "op " << static_cast<int>(d.code);
    wire_header h{};
    h.code = d.code;
    h.flags = has_ack;
    std::vector<uint8_t> bytes(sizeof(h));
    std::memcpy(bytes.data(), &h, sizeof(h));
    wire_header out;
    EXPECT_EQ(decode_header(bytes.data(), d.length, out), status::success)
        << "op " << static_cast<int>(d.code);
    EXPECT_EQ(decode_header(bytes.data(), d.length - 1, out), status::invalid_value)
        << "op " << static_cast<int>(d.code);
  }
}

}  // namespace
}  // namespace zc::rdma::internal
