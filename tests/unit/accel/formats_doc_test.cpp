// The byte examples of docs/FORMATS.md §4 are what the engines and the gga format v2 codec produce
// and accept, and what liblz4 and GF(2^8) arithmetic in the test give, so the document cannot
// drift from the code.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "accel/ec_engine.hpp"
#include "accel/gga_format.hpp"
#include "accel/lz4_engine.hpp"
#include "core/crc32c.hpp"
#include "core/progress_engine.hpp"
#include "unit/accel/accel_test_support.hpp"
#include "unit/storage/hex.hpp"

namespace zc::accel {
namespace {

// The first ```hex block after "<!-- example: NAME -->".
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
  const size_t open = doc.find("```hex", marker);
  const size_t start = doc.find('\n', open);
  const size_t close = doc.find("```", start);
  if (open == std::string::npos || close == std::string::npos) {
    ADD_FAILURE() << "example " << name << " has no hex block";
    return {};
  }
  return storage::test::hex(std::string_view(doc).substr(start, close - start));
}

std::vector<uint8_t> example_block() {
  std::string text;
  while (text.size() < 64) text += "gga offload: 2+1 erasure coding ";
  return {text.begin(), text.end()};
}

TEST(accel_formats_doc, gga_block_image_example_matches_liblz4_and_the_engine) {
  const auto block = example_block();
  const auto image = doc_example("gga_block_image");
  ASSERT_EQ(image.size(), 64u);
  EXPECT_EQ(test::reference_image(block), image);

  core::progress_engine pe{core::poll_mode::busy};
  int done = 0;
  auto finish = [&](core::task_base& t) {
    EXPECT_EQ(t.result(), status::success);
    ++done;
    t.free();
  };
  lz4_engine lz4(pe, {.compress_tasks = 1,
                      .decompress_tasks = 1,
                      .max_block_size = 64,
                      .on_compress_done = finish,
                      .on_compress_error = finish,
                      .on_decompress_done = finish,
                      .on_decompress_error = finish});
  ASSERT_EQ(lz4.start(), status::success);
  test::buffers bufs;
  core::buffer& out = bufs.empty(64);
  core::buffer& back = bufs.empty(64);
  ASSERT_EQ(lz4.submit(*lz4.allocate_compress(bufs.with_data(block), out)), status::success);
  ASSERT_EQ(lz4.submit(*lz4.allocate_decompress(bufs.with_data(image), back)), status::success);
  pe.progress();
  EXPECT_EQ(done, 2);
  EXPECT_EQ(test::buffers::data_of(out), image);
  EXPECT_EQ(test::buffers::data_of(back), block);
  lz4.stop();
}

TEST(accel_formats_doc, gga_parity_examples_match_gf_arithmetic_and_the_engine) {
  const auto image = doc_example("gga_block_image");
  ASSERT_EQ(image.size(), 64u);
  const std::vector<uint8_t> d1(image.begin(), image.begin() + 32);
  const std::vector<uint8_t> d2(image.begin() + 32, image.end());
  const auto vandermonde = doc_example("gga_parity_vandermonde");
  const auto cauchy = doc_example("gga_parity_cauchy");
  EXPECT_EQ(test::parity(test::vandermonde_row(), d1, d2), vandermonde);
  EXPECT_EQ(test::parity(test::cauchy_row(), d1, d2), cauchy);

  core::progress_engine pe{core::poll_mode::busy};
  auto finish = [](core::task_base& t) {
    EXPECT_EQ(t.result(), status::success);
    t.free();
  };
  ec_engine ec(pe, {.create_tasks = 2,
                    .recover_tasks = 2,
                    .on_create_done = finish,
                    .on_create_error = finish,
                    .on_recover_done = finish,
                    .on_recover_error = finish});
  ASSERT_EQ(ec.start(), status::success);
  test::buffers bufs;
  core::buffer& h1 = bufs.with_data(d1);
  core::buffer& h2 = bufs.with_data(d2);
  core::buffer& pv = bufs.empty(32);
  core::buffer& pc = bufs.empty(32);
  ASSERT_EQ(ec.submit(*ec.allocate_create(ec_matrix::vandermonde, h1, h2, pv)), status::success);
  ASSERT_EQ(ec.submit(*ec.allocate_create(ec_matrix::cauchy, h1, h2, pc)), status::success);
  pe.progress();
  EXPECT_EQ(test::buffers::data_of(pv), vandermonde);
  EXPECT_EQ(test::buffers::data_of(pc), cauchy);
  // And the documented Cauchy parity gives D2 back through the decode matrix.
  core::buffer& rebuilt = bufs.empty(32);
  ASSERT_EQ(
      ec.submit(*ec.allocate_recover(ec_matrix::cauchy, 1, h1, bufs.with_data(cauchy), rebuilt)),
      status::success);
  pe.progress();
  EXPECT_EQ(test::buffers::data_of(rebuilt), d2);
  ec.stop();
}

// §4.3: the example entry is what encode_gga_entry writes for its fields, and decodes back.
TEST(accel_formats_doc, gga_entry_example_matches_the_codec) {
  const auto bytes = doc_example("gga_entry");
  ASSERT_EQ(bytes.size(), gga_entry_size);
  const uint32_t crc = core::crc32c(example_block());
  EXPECT_EQ(crc, 0x71A92EA3u);
  const gga_entry e{0x0000000100000002ull, crc, gga_stored_as::lz4, gga_role::data_1};
  std::array<uint8_t, gga_entry_size> encoded{};
  encode_gga_entry(e, encoded);
  EXPECT_EQ(std::vector<uint8_t>(encoded.begin(), encoded.end()), bytes);
  gga_entry back;
  ASSERT_EQ(decode_gga_entry(std::span<const uint8_t, gga_entry_size>(bytes.data(), gga_entry_size),
                             gga_role::data_1, back),
            status::success);
  EXPECT_EQ(back, e);
}

// §4.3: the example label is what encode_gga_label writes for its fields, and decodes back.
TEST(accel_formats_doc, gga_label_example_matches_the_codec) {
  const auto bytes = doc_example("gga_label");
  ASSERT_EQ(bytes.size(), gga_label_size);
  const gga_label l{gga_role::data_1, 0, 32, 1, 0x0123456789ABCDEFull};
  std::array<uint8_t, gga_label_size> encoded{};
  encode_gga_label(l, encoded);
  EXPECT_EQ(std::vector<uint8_t>(encoded.begin(), encoded.end()), bytes);
  gga_label back;
  ASSERT_EQ(decode_gga_label(std::span<const uint8_t, gga_label_size>(bytes.data(), gga_label_size),
                             back),
            gga_label_state::valid);
  EXPECT_EQ(back, l);
}

// §4.3: the three slots of the §4.1 example block are the codec's layout of its image halves and
// Vandermonde parity with generation-1 entries; every pair of them reads back as one LZ4 write
// whose halves are the image, and the .sbc header holds the slot and the label block.
TEST(accel_formats_doc, gga_v2_slot_examples_are_the_layout_of_the_example_block) {
  const auto layout = gga_slot_layout::of(gga_format::v2, 32);
  ASSERT_EQ(layout.slot(), 48u);
  const auto image = doc_example("gga_block_image");
  const auto parity = doc_example("gga_parity_vandermonde");
  ASSERT_EQ(image.size(), 64u);
  ASSERT_EQ(parity.size(), 32u);
  const uint32_t crc = core::crc32c(example_block());
  const std::pair<gga_role, std::vector<uint8_t>> slots[] = {
      {gga_role::data_1, doc_example("gga_v2_slot_data_1")},
      {gga_role::data_2, doc_example("gga_v2_slot_data_2")},
      {gga_role::parity, doc_example("gga_v2_slot_parity")}};
  const uint8_t* halves[] = {image.data(), image.data() + 32, parity.data()};
  gga_entry entries[3];
  for (size_t i = 0; i < 3; ++i) {
    const auto& [role, doc] = slots[i];
    SCOPED_TRACE(testing::Message() << "role " << int(role));
    ASSERT_EQ(doc.size(), layout.slot());
    std::vector<uint8_t> built(layout.slot(), 0);
    encode_gga_entry(
        {1, crc, gga_stored_as::lz4, role},
        std::span<uint8_t, gga_entry_size>(built.data() + layout.entry_at(role), gga_entry_size));
    std::copy_n(halves[i], layout.half, built.begin() + layout.half_at(role));
    EXPECT_EQ(built, doc);
    ASSERT_EQ(decode_gga_entry(std::span<const uint8_t, gga_entry_size>(
                                   doc.data() + layout.entry_at(role), gga_entry_size),
                               role, entries[i]),
              status::success);
  }
  EXPECT_EQ(judge_gga_pair(entries[0], entries[1]), gga_pair_verdict::lz4);
  EXPECT_EQ(judge_gga_pair(entries[0], entries[2]), gga_pair_verdict::lz4);
  EXPECT_EQ(judge_gga_pair(entries[1], entries[2]), gga_pair_verdict::lz4);
  // data_1's slot followed by data_2's: e1 | D1 | D2 | e2, the image contiguous in the middle.
  std::vector<uint8_t> chunk = slots[0].second;
  chunk.insert(chunk.end(), slots[1].second.begin(), slots[1].second.end());
  EXPECT_EQ(std::vector<uint8_t>(chunk.begin() + gga_entry_size, chunk.end() - gga_entry_size),
            image);

  // magic, block_size H, block_count target_blocks_for(1): one slot, then the label block.
  const auto header = doc_example("gga_v2_sbc_header");
  ASSERT_EQ(header.size(), 16u);
  EXPECT_EQ(layout.target_blocks_for(1), 3u);
  const std::vector<uint8_t> expected{0xDE, 0xAD, 0xF0, 0x0D, 0x13, 0x37, 0xFA, 0xDE,
                                      0,    0,    0,    32,   0,    0,    0,    3};
  EXPECT_EQ(header, expected);
}

}  // namespace
}  // namespace zc::accel
