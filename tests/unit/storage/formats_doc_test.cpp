// Checks that the byte examples in docs/FORMATS.md are what the code produces and accepts, so the
// document cannot drift from the implementation.
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <sstream>

#include "core/blob.hpp"
#include "core/bytes.hpp"
#include "core/memory_map.hpp"
#include "storage/control_message.hpp"
#include "storage/io_message.hpp"
#include "storage/keep_alive.hpp"
#include "storage/sbc_file.hpp"
#include "unit/storage/hex.hpp"

namespace zc::storage {
namespace {

std::string formats_doc() {
  std::ifstream in(std::string(ZC_SOURCE_DIR) + "/docs/FORMATS.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The first ```hex block after "<!-- example: NAME -->".
std::vector<uint8_t> doc_example(const std::string& name) {
  const std::string doc = formats_doc();
  const size_t marker = doc.find("<!-- example: " + name + " -->");
  if (marker == std::string::npos) {
    ADD_FAILURE() << "docs/FORMATS.md has no example " << name;
    return {};
  }
  const size_t open = doc.find("```hex", marker);
  const size_t start = doc.find('\n', open);
  const size_t close = doc.find("```", start);
  if (open == std::string::npos || close == std::string::npos) {
    ADD_FAILURE() << "example " << name << " has no hex block";
    return {};
  }
  return test::hex(std::string_view(doc).substr(start, close - start));
}

void expect_control_example(const std::string& name, const message& m) {
  SCOPED_TRACE(name);
  const auto bytes = doc_example(name);
  EXPECT_EQ(encode(m), bytes);
  const decode_result r = decode_frame(bytes);
  ASSERT_EQ(r.outcome, decode_outcome::message) << r.error_text;
  EXPECT_EQ(r.consumed, bytes.size());
  EXPECT_EQ(r.msg, m);
}

TEST(formats_doc, control_message_examples_match_the_codec) {
  expect_control_example("query_storage_request",
                         {message_type::query_storage_request, 0, 0, empty_payload{}});
  expect_control_example("query_storage_response", {message_type::query_storage_response, 0, 0,
                                                    query_storage_response_payload{524288, 4096}});
  expect_control_example("error_response", {message_type::error_response, 3, 3,
                                            error_response_payload{status::invalid_value, "bad"}});
  expect_control_example("init_storage_request",
                         {message_type::init_storage_request, 1, 1,
                          init_storage_request_payload{128, 2, {0x01, 0x02, 0x03, 0x04}}});
  expect_control_example("create_rdma_connection_request",
                         {message_type::create_rdma_connection_request, 6, 1,
                          rdma_connection_payload{1, rdma_role::io_control, {0xAB, 0xCD, 0xEF}}});
  expect_control_example("keep_alive_request", make_keep_alive());
  expect_control_example("keep_alive_response",
                         make_response(make_keep_alive(), message_type::keep_alive_response));
}

TEST(formats_doc, io_message_examples_match_the_view) {
  std::array<uint8_t, io_message_size> buf;
  buf.fill(0xFF);
  io_message_view m{buf};
  m.clear();
  m.set_type(io_message_type::read);
  m.set_user_data(7);
  m.set_io_size(4096);
  m.set_requester_offset(0x2000);
  m.set_storage_offset(0x10000);
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.end()), doc_example("io_message_read_request"));

  m.set_type(io_message_type::result);
  m.set_result(status::io_failed);
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.end()),
            doc_example("io_message_io_failed_response"));
}

TEST(formats_doc, sbc_header_example_matches_the_writer) {
  const auto header = encode_sbc_header(4096, 128);
  EXPECT_EQ(std::vector<uint8_t>(header.begin(), header.end()), doc_example("sbc_header"));
}

TEST(formats_doc, rdma_memory_export_example_matches_the_framing_and_import) {
  const auto bytes = doc_example("rdma_memory_export");
  std::vector<uint8_t> payload;
  byte_writer w(payload);
  w.u64(0x0123456789ABCDEFull);
  w.u64(0x0000000100000002ull);
  w.u64(0x5F3C9A0E12D47B61ull);
  w.u64(0x00007F3A12340000ull);
  w.u64(1024 * 1024);
  w.u32(static_cast<uint32_t>(core::access::rdma_read | core::access::rdma_write));
  EXPECT_EQ(core::frame_blob(core::blob_kind::rdma_memory, payload), bytes);

  const auto map = core::memory_map::import_rdma(bytes);
  const core::remote_region& r = map->remote();
  EXPECT_EQ(r.owner_token, 0x0123456789ABCDEFull);
  EXPECT_EQ(r.export_id, 0x0000000100000002ull);
  EXPECT_EQ(r.key, 0x5F3C9A0E12D47B61ull);
  EXPECT_EQ(r.base, 0x00007F3A12340000ull);
  EXPECT_EQ(r.length, 1024u * 1024u);
  EXPECT_EQ(r.permissions, core::access::rdma_read | core::access::rdma_write);
}

}  // namespace
}  // namespace zc::storage
