#include "storage/control_message.hpp"

#include <gtest/gtest.h>

#include "core/bytes.hpp"
#include "unit/storage/hex.hpp"

namespace zc::storage {
namespace {

using test::bytes_of;
using test::hex;

decode_result decode(const std::vector<uint8_t>& bytes,
                     size_t max_body_size = default_max_body_size) {
  return decode_frame(bytes, max_body_size);
}

void expect_decodes_to(const std::vector<uint8_t>& bytes, const message& expected) {
  const decode_result r = decode(bytes);
  ASSERT_EQ(r.outcome, decode_outcome::message) << r.error_text;
  EXPECT_EQ(r.consumed, bytes.size());
  EXPECT_EQ(r.msg, expected);
}

void expect_error(const std::vector<uint8_t>& bytes, status code, std::string_view text_part,
                  size_t max_body_size = default_max_body_size) {
  const decode_result r = decode(bytes, max_body_size);
  ASSERT_EQ(r.outcome, decode_outcome::error);
  EXPECT_EQ(r.error, code) << r.error_text;
  EXPECT_NE(r.error_text.find(text_part), std::string::npos) << r.error_text;
  EXPECT_EQ(r.consumed, 0u);
}

// Frame with the given raw body (the header is computed).
std::vector<uint8_t> frame(const std::vector<uint8_t>& body) {
  std::vector<uint8_t> out;
  byte_writer w(out);
  w.u32(static_cast<uint32_t>(body.size()));
  w.bytes(body);
  return out;
}

std::vector<message> one_of_each_type() {
  std::vector<message> all;
  for (uint32_t t = 0; t < message_type_count; ++t) {
    message m;
    m.type = static_cast<message_type>(t);
    m.message_id = 100 + t;
    m.correlation_id = 0xA0B0C0D0u + t;
    switch (m.type) {
      case message_type::error_response:
        m.payload = error_response_payload{status::bad_state, "Mismatch in block_size: 1 vs 2"};
        break;
      case message_type::query_storage_response:
        m.payload = query_storage_response_payload{0x0102030405060708ull, 8192};
        break;
      case message_type::init_storage_request:
        m.payload = init_storage_request_payload{64, 4, {9, 8, 7, 6, 5}};
        break;
      case message_type::create_rdma_connection_request:
        m.payload = rdma_connection_payload{3, rdma_role::io_data, {1, 2}};
        break;
      case message_type::create_rdma_connection_response:
        m.payload = rdma_connection_payload{3, rdma_role::io_control, std::vector<uint8_t>(300, 7)};
        break;
      default:
        m.payload = empty_payload{};
        break;
    }
    all.push_back(m);
  }
  return all;
}

// ---- REFERENCE_SPEC §2.4 worked examples, both ways ------------------------------------------

TEST(control_message, query_storage_request_matches_reference_bytes) {
  const message m{message_type::query_storage_request, 0, 0, empty_payload{}};
  const auto bytes = hex("00 00 00 0C | 00 00 00 01 | 00 00 00 00 | 00 00 00 00");
  EXPECT_EQ(bytes.size(), 16u);
  EXPECT_EQ(encode(m), bytes);
  expect_decodes_to(bytes, m);
}

TEST(control_message, query_storage_response_matches_reference_bytes) {
  const message m{message_type::query_storage_response, 0, 0,
                  query_storage_response_payload{524288, 4096}};
  const auto bytes =
      hex("00 00 00 18 | 00 00 00 02 | 00 00 00 00 | 00 00 00 00 | 00 00 00 00 00 08 00 00 | "
          "00 00 10 00");
  EXPECT_EQ(encode(m), bytes);
  expect_decodes_to(bytes, m);
}

TEST(control_message, error_response_matches_reference_bytes) {
  const message m{message_type::error_response, 3, 3,
                  error_response_payload{status::invalid_value, "bad"}};
  const auto bytes =
      hex("00 00 00 17 | 00 00 00 00 | 00 00 00 03 | 00 00 00 03 | 00 00 00 06 | 00 00 00 03 | "
          "62 61 64");
  EXPECT_EQ(encode(m), bytes);
  expect_decodes_to(bytes, m);
}

TEST(control_message, blob_messages_have_the_reference_body_length) {
  for (size_t blob : {0u, 1u, 57u, 1000u}) {
    const message init{message_type::init_storage_request, 1, 1,
                       init_storage_request_payload{8, 2, std::vector<uint8_t>(blob, 0x5A)}};
    const message conn{
        message_type::create_rdma_connection_request, 2, 1,
        rdma_connection_payload{0, rdma_role::io_control, std::vector<uint8_t>(blob, 0xA5)}};
    for (const auto& m : {init, conn}) {
      const auto bytes = encode(m);
      ASSERT_EQ(bytes.size(), 4 + 12 + 4 + 4 + 4 + blob);
      EXPECT_EQ(load_be32(bytes.data()), 12 + 4 + 4 + 4 + blob);
    }
  }
}

// ---- round trips -----------------------------------------------------------------------------

TEST(control_message, every_type_round_trips) {
  for (const message& m : one_of_each_type()) {
    SCOPED_TRACE(std::string(to_string(m.type)));
    const auto bytes = encode(m);
    EXPECT_EQ(load_be32(bytes.data()), bytes.size() - frame_header_size);
    EXPECT_EQ(load_be32(bytes.data() + 4), static_cast<uint32_t>(m.type));
    expect_decodes_to(bytes, m);
  }
}

TEST(control_message, unknown_error_codes_are_relayed_unchanged) {
  const message m{message_type::error_response, 1, 2,
                  error_response_payload{static_cast<status>(1234), ""}};
  const auto bytes = encode(m);
  expect_decodes_to(bytes, m);
  EXPECT_EQ(load_be32(bytes.data() + 16), 1234u);
}

TEST(control_message, names_follow_the_reference) {
  const char* names[] = {"error_response",
                         "query_storage_request",
                         "query_storage_response",
                         "init_storage_request",
                         "init_storage_response",
                         "create_rdma_connection_request",
                         "create_rdma_connection_response",
                         "start_storage_request",
                         "start_storage_response",
                         "stop_storage_request",
                         "stop_storage_response",
                         "shutdown_request",
                         "shutdown_response",
                         "keep_alive_request",
                         "keep_alive_response"};
  for (uint32_t t = 0; t < message_type_count; ++t)
    EXPECT_EQ(to_string(static_cast<message_type>(t)), names[t]);
  EXPECT_EQ(to_string(static_cast<message_type>(15)), "unknown");
  EXPECT_EQ(to_string(rdma_role::io_data), "io_data");
  EXPECT_EQ(to_string(rdma_role::io_control), "io_control");
  EXPECT_EQ(static_cast<uint32_t>(rdma_role::io_data), 0u);
  EXPECT_EQ(static_cast<uint32_t>(rdma_role::io_control), 1u);
}

TEST(control_message, responses_copy_the_request_ids) {
  const message request{message_type::start_storage_request, 7, 3, empty_payload{}};
  const message reply = make_response(request, message_type::start_storage_response);
  EXPECT_EQ(reply.message_id, 7u);
  EXPECT_EQ(reply.correlation_id, 3u);
  EXPECT_EQ(reply.type, message_type::start_storage_response);
  const message error = make_error_response(request, status::time_out, "late");
  EXPECT_EQ(error.message_id, 7u);
  EXPECT_EQ(error.correlation_id, 3u);
  EXPECT_EQ(std::get<error_response_payload>(error.payload),
            (error_response_payload{status::time_out, "late"}));
}

TEST(control_message, encode_refuses_a_payload_of_another_type) {
  const message m{message_type::query_storage_response, 0, 0, empty_payload{}};
  try {
    (void)encode(m);
    FAIL() << "expected status_error";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::invalid_value);
  }
  EXPECT_FALSE(
      payload_matches(message_type::init_storage_response, init_storage_request_payload{}));
  EXPECT_TRUE(
      payload_matches(message_type::create_rdma_connection_response, rdma_connection_payload{}));
  EXPECT_FALSE(payload_matches(static_cast<message_type>(99), empty_payload{}));
}

TEST(control_message, encode_to_appends) {
  std::vector<uint8_t> out = {0xEE};
  encode_to({message_type::shutdown_request, 4, 4, empty_payload{}}, out);
  ASSERT_EQ(out.size(), 17u);
  EXPECT_EQ(out[0], 0xEE);
  EXPECT_EQ(load_be32(out.data() + 1), 12u);
}

// ---- incomplete input and streams ------------------------------------------------------------

TEST(control_message, every_prefix_of_a_frame_needs_more_bytes) {
  for (const message& m : one_of_each_type()) {
    const auto bytes = encode(m);
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      const decode_result r = decode_frame(std::span(bytes).first(cut));
      ASSERT_EQ(r.outcome, decode_outcome::need_more) << to_string(m.type) << " cut " << cut;
      EXPECT_EQ(r.consumed, 0u);
    }
  }
}

TEST(control_message, frames_split_across_reads_decode_in_order) {
  const auto all = one_of_each_type();
  std::vector<uint8_t> stream;
  for (const auto& m : all) encode_to(m, stream);

  // Feed the stream in awkward 5-byte pieces, as a socket might deliver it.
  std::vector<uint8_t> pending;
  std::vector<message> got;
  for (size_t at = 0; at < stream.size(); at += 5) {
    const size_t n = std::min<size_t>(5, stream.size() - at);
    pending.insert(pending.end(), stream.begin() + at, stream.begin() + at + n);
    for (;;) {
      decode_result r = decode_frame(pending);
      ASSERT_NE(r.outcome, decode_outcome::error) << r.error_text;
      if (r.outcome == decode_outcome::need_more) break;
      got.push_back(r.msg);
      pending.erase(pending.begin(), pending.begin() + r.consumed);
    }
  }
  EXPECT_TRUE(pending.empty());
  EXPECT_EQ(got, all);
}

TEST(control_message, two_frames_in_one_buffer_decode_one_at_a_time) {
  auto bytes = encode({message_type::stop_storage_request, 1, 1, empty_payload{}});
  const size_t first = bytes.size();
  encode_to({message_type::shutdown_request, 2, 2, empty_payload{}}, bytes);
  const decode_result r = decode(bytes);
  ASSERT_EQ(r.outcome, decode_outcome::message);
  EXPECT_EQ(r.consumed, first);
  EXPECT_EQ(r.msg.type, message_type::stop_storage_request);
}

// ---- malformed input -------------------------------------------------------------------------

TEST(control_message, body_shorter_than_the_header_is_rejected) {
  expect_error(hex("00 00 00 08 | 00 00 00 01 | 00 00 00 00"), status::invalid_value, "shorter");
  // Reported from the 4-byte length alone, without waiting for a body.
  expect_error(hex("00 00 00 00"), status::invalid_value, "shorter");
}

TEST(control_message, oversized_body_is_rejected_before_it_arrives) {
  expect_error(hex("00 01 00 01"), status::too_big, "exceeds");
  expect_error(hex("FF FF FF FF | 00 00 00 01"), status::too_big, "exceeds");
  // The maximum is configurable; exactly the maximum is fine.
  const auto m = encode({message_type::init_storage_request, 0, 0,
                         init_storage_request_payload{1, 1, std::vector<uint8_t>(100, 1)}});
  const size_t body = m.size() - frame_header_size;
  EXPECT_EQ(decode(m, body).outcome, decode_outcome::message);
  expect_error(m, status::too_big, "exceeds", body - 1);
}

TEST(control_message, unknown_type_is_rejected) {
  expect_error(frame(hex("00 00 00 0F | 00 00 00 00 | 00 00 00 00")), status::not_supported,
               "unknown control message type 15");
  expect_error(frame(hex("FF FF FF FF | 00 00 00 00 | 00 00 00 00")), status::not_supported,
               "unknown");
}

TEST(control_message, payload_shorter_than_its_fields_is_rejected) {
  // query_storage_response with only 4 of its 12 payload bytes.
  expect_error(frame(hex("00 00 00 02 | 00 00 00 00 | 00 00 00 00 | 00 00 00 01")),
               status::invalid_value, "truncated");
  // create_rdma_connection_request without the blob length.
  expect_error(frame(hex("00 00 00 05 | 00 00 00 00 | 00 00 00 00 | 00 00 00 00 | 00 00 00 01")),
               status::invalid_value, "no length for connection_details");
  // error_response with no payload at all.
  expect_error(frame(hex("00 00 00 00 | 00 00 00 00 | 00 00 00 00")), status::invalid_value,
               "truncated");
}

TEST(control_message, string_running_past_the_frame_is_rejected) {
  // error_response whose message claims 10 bytes but the frame holds 3.
  expect_error(frame(hex("00 00 00 00 | 00 00 00 03 | 00 00 00 03 | 00 00 00 06 | 00 00 00 0A | "
                         "62 61 64")),
               status::invalid_value, "message length 10 runs past the end of the frame");
}

TEST(control_message, blob_length_past_the_end_is_rejected) {
  // init_storage_request with a 4 GiB blob length and a 4-byte blob.
  expect_error(frame(hex("00 00 00 03 | 00 00 00 01 | 00 00 00 01 | 00 00 00 80 | 00 00 00 02 | "
                         "FF FF FF FF | 01 02 03 04")),
               status::invalid_value, "mmap_export length 4294967295 runs past");
  // Same for connection_details, off by one.
  expect_error(frame(hex("00 00 00 06 | 00 00 00 01 | 00 00 00 01 | 00 00 00 00 | 00 00 00 00 | "
                         "00 00 00 04 | 01 02 03")),
               status::invalid_value, "connection_details length 4 runs past");
}

TEST(control_message, trailing_bytes_after_the_payload_are_rejected) {
  expect_error(hex("00 00 00 0D | 00 00 00 01 | 00 00 00 00 | 00 00 00 00 | 00"),
               status::invalid_value, "1 trailing bytes");
  expect_error(frame(hex("00 00 00 00 | 00 00 00 03 | 00 00 00 03 | 00 00 00 06 | 00 00 00 02 | "
                         "62 61 64")),
               status::invalid_value, "trailing");
}

TEST(control_message, unknown_rdma_role_is_rejected) {
  expect_error(frame(hex("00 00 00 05 | 00 00 00 01 | 00 00 00 01 | 00 00 00 00 | 00 00 00 02 | "
                         "00 00 00 00")),
               status::invalid_value, "unknown rdma role 2");
}

TEST(control_message, an_error_frame_is_reported_even_with_more_data_behind_it) {
  auto bytes = hex("00 00 00 0D | 00 00 00 01 | 00 00 00 00 | 00 00 00 00 | 00");
  encode_to({message_type::shutdown_request, 0, 0, empty_payload{}}, bytes);
  expect_error(bytes, status::invalid_value, "trailing");
}

}  // namespace
}  // namespace zc::storage
