// The byte examples of docs/FORMATS.md §4 are what the engines produce and accept, and what
// liblz4 and GF(2^8) arithmetic in the test give, so the document cannot drift from the code.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "accel/ec_engine.hpp"
#include "accel/lz4_engine.hpp"
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

}  // namespace
}  // namespace zc::accel
