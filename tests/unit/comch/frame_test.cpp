// The comch control-socket frames (comch/internal/frame.hpp): the worked examples of
// docs/FORMATS.md §6 byte for byte, and what the decoder refuses.
#include "comch/internal/frame.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "comch/internal/queue.hpp"
#include "core/bytes.hpp"
#include "unit/storage/hex.hpp"

namespace zc::comch::internal {
namespace {

using storage::test::hex;

// The first ```hex block after "<!-- example: NAME -->" in docs/FORMATS.md.
std::vector<uint8_t> doc_example(const std::string& name) {
  std::ifstream in(std::string(ZC_SOURCE_DIR) + "/docs/FORMATS.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const size_t marker = doc.find("<!-- example: " + name + " -->");
  if (marker == std::string::npos) {
    ADD_FAILURE() << "docs/FORMATS.md has no example " << name;
    return {};
  }
  const size_t start = doc.find('\n', doc.find("```hex", marker));
  const size_t close = doc.find("```", start);
  return hex(std::string_view(doc).substr(start, close - start));
}

std::vector<uint8_t> frame_bytes(frame_type type, const std::vector<uint8_t>& payload,
                                 uint16_t fds = 0) {
  return make_frame(type, payload, fds);
}

// Decodes `bytes` as exactly one frame of `type` and its payload as P.
template <typename P>
P decode_example(const std::vector<uint8_t>& bytes, frame_type type) {
  const decoded_frame f = decode_frame(bytes, 4080);
  EXPECT_EQ(f.outcome, frame_outcome::frame) << f.error_text;
  EXPECT_EQ(f.consumed, bytes.size());
  EXPECT_EQ(f.header.type, static_cast<uint16_t>(type));
  P p;
  EXPECT_EQ(decode(f.payload, p), status::success);
  return p;
}

TEST(comch_frame, formats_doc_examples_match_the_codec) {
  const auto hello = doc_example("comch_hello");
  EXPECT_EQ(frame_bytes(frame_type::hello, encode(hello_payload{1, 4080})), hello);
  EXPECT_EQ(decode_example<hello_payload>(hello, frame_type::hello), (hello_payload{1, 4080}));

  const auto refused = doc_example("comch_refused");
  EXPECT_EQ(frame_bytes(frame_type::refused, encode(refused_payload{2, "uid"})), refused);
  EXPECT_EQ(decode_example<refused_payload>(refused, frame_type::refused),
            (refused_payload{2, "uid"}));

  const auto consumer_new = doc_example("comch_consumer_new");
  const std::vector<uint8_t> blob{1, 2, 3, 4};
  EXPECT_EQ(frame_bytes(frame_type::consumer_new, encode(consumer_new_payload{7, 64, blob}),
                        consumer_new_fds),
            consumer_new);
  EXPECT_EQ(decode_example<consumer_new_payload>(consumer_new, frame_type::consumer_new),
            (consumer_new_payload{7, 64, blob}));

  const auto expired = doc_example("comch_consumer_expired");
  EXPECT_EQ(frame_bytes(frame_type::consumer_expired, encode(consumer_expired_payload{7})),
            expired);
  EXPECT_EQ(decode_example<consumer_expired_payload>(expired, frame_type::consumer_expired),
            consumer_expired_payload{7});
}

TEST(comch_frame, header_is_judged_before_the_payload_arrives) {
  // Only the 8 header bytes of a frame that declares far more than any limit: refused at once.
  uint8_t header[frame_header_size];
  encode_header(header, {1u << 30, static_cast<uint16_t>(frame_type::message), 0});
  auto f = decode_frame(header, 4080);
  EXPECT_EQ(f.outcome, frame_outcome::error);
  EXPECT_EQ(f.error, status::too_big);
  EXPECT_EQ(f.consumed, 0u);

  encode_header(header, {max_internal_payload + 1, static_cast<uint16_t>(frame_type::hello), 0});
  EXPECT_EQ(decode_frame(header, 1u << 20).error, status::too_big);

  // Within its limit: the decoder waits for the payload.
  encode_header(header, {4080, static_cast<uint16_t>(frame_type::message), 0});
  f = decode_frame(header, 4080);
  EXPECT_EQ(f.outcome, frame_outcome::need_more);
  EXPECT_EQ(f.header.length, 4080u);
  // Before the handshake no message may come at all.
  encode_header(header, {1, static_cast<uint16_t>(frame_type::message), 0});
  EXPECT_EQ(decode_frame(header, 0).error, status::too_big);

  EXPECT_EQ(decode_frame(std::span<const uint8_t>(header, 7), 4080).outcome,
            frame_outcome::need_more);
}

TEST(comch_frame, unknown_types_and_wrong_descriptor_counts_are_refused) {
  uint8_t header[frame_header_size];
  for (uint16_t type : {uint16_t{0}, uint16_t{7}, uint16_t{0x7777}}) {
    encode_header(header, {0, type, 0});
    EXPECT_EQ(decode_frame(header, 4080).error, status::invalid_value) << type;
  }
  const std::pair<frame_type, uint16_t> wrong[] = {
      {frame_type::message, 1},      {frame_type::hello, 3},
      {frame_type::consumer_new, 0}, {frame_type::consumer_new, 2},
      {frame_type::consumer_new, 4}, {frame_type::consumer_expired, 1}};
  for (auto [type, fds] : wrong) {
    encode_header(header, {0, static_cast<uint16_t>(type), fds});
    EXPECT_EQ(decode_frame(header, 4080).error, status::invalid_value)
        << static_cast<int>(type) << " with " << fds;
  }
}

TEST(comch_frame, payload_decoders_are_strict) {
  hello_payload hello;
  EXPECT_EQ(decode(encode(hello_payload{1, 0}), hello), status::invalid_value);
  auto longer = encode(hello_payload{1, 4080});
  longer.push_back(0);
  EXPECT_EQ(decode(longer, hello), status::invalid_value);
  longer.resize(7);
  EXPECT_EQ(decode(longer, hello), status::invalid_value);

  consumer_new_payload announced;
  const std::vector<uint8_t> blob{9};
  for (uint32_t slots : {0u, 1u, 3u, 96u, max_queue_slots * 2, 0xFFFFFFFFu})
    EXPECT_EQ(decode(encode(consumer_new_payload{1, slots, blob}), announced),
              status::invalid_value)
        << slots;
  EXPECT_EQ(decode(encode(consumer_new_payload{1, max_queue_slots, blob}), announced),
            status::success);
  EXPECT_EQ(decode(encode(consumer_new_payload{0, 2, blob}), announced), status::invalid_value);
  EXPECT_EQ(decode(encode(consumer_new_payload{1, 2, {}}), announced), status::invalid_value);
  // A blob length that runs past the payload.
  auto lying = encode(consumer_new_payload{1, 2, blob});
  store_be32(lying.data() + 8, 2);
  EXPECT_EQ(decode(lying, announced), status::invalid_value);

  consumer_expired_payload expired;
  EXPECT_EQ(decode(encode(consumer_expired_payload{0}), expired), status::invalid_value);

  refused_payload refused;
  auto cut = encode(refused_payload{2, "reason"});
  cut.pop_back();
  EXPECT_EQ(decode(cut, refused), status::invalid_value);
}

}  // namespace
}  // namespace zc::comch::internal
