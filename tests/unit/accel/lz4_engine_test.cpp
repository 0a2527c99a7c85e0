// lz4_engine: images byte for byte against liblz4's own frame output, round trips, every kind of
// malformed image refused without a stray byte written, incompressible blocks, and the task model
// (pool exhaustion, completion inside progress(), stop).
#include "accel/lz4_engine.hpp"

#include <gtest/gtest.h>

#include "core/bytes.hpp"
#include "core/progress_engine.hpp"
#include "unit/accel/accel_test_support.hpp"

namespace zc::accel {
namespace {

using test::buffers;

struct accel_lz4 : ::testing::Test {
  core::progress_engine pe{core::poll_mode::busy};
  int done = 0;
  int failed = 0;
  status last = status::success;
  size_t last_payload = 0;
  std::unique_ptr<lz4_engine> engine;
  buffers bufs;

  void make(uint32_t tasks = 4, size_t max_block = 256 * 1024) {
    engine = std::make_unique<lz4_engine>(
        pe, lz4_engine_config{
                .compress_tasks = tasks,
                .decompress_tasks = tasks,
                .max_block_size = max_block,
                .on_compress_done = [this](lz4_compress_task& t) { finish(t, true); },
                .on_compress_error = [this](lz4_compress_task& t) { finish(t, false); },
                .on_decompress_done = [this](lz4_decompress_task& t) { finish(t, true); },
                .on_decompress_error = [this](lz4_decompress_task& t) { finish(t, false); }});
    ASSERT_EQ(engine->start(), status::success);
  }
  template <typename T>
  void finish(T& t, bool success) {
    (success ? done : failed) += 1;
    last = t.result();
    if constexpr (std::is_same_v<T, lz4_compress_task>) last_payload = t.payload_size();
    t.free();
  }
  void TearDown() override {
    if (engine) {
      engine->stop();
      pe.progress();
    }
  }

  // Compresses through the engine; returns the status and the image appended to `out`.
  status compress(const std::vector<uint8_t>& block, std::vector<uint8_t>& image) {
    core::buffer& src = bufs.with_data(block);
    core::buffer& dst = bufs.empty(block.size());
    auto* t = engine->allocate_compress(src, dst);
    EXPECT_NE(t, nullptr);
    EXPECT_EQ(engine->submit(*t), status::success);
    const int before = done + failed;
    EXPECT_TRUE(pe.run_until([&] { return done + failed > before; }, std::chrono::seconds(5)));
    image = buffers::data_of(dst);
    return last;
  }
  // Decompresses `image` into a destination of `room` bytes; returns the status, and the whole
  // destination (data and untouched tail room) in `out`.
  status decompress(const std::vector<uint8_t>& image, size_t room, std::vector<uint8_t>& out) {
    core::buffer& src = bufs.with_data(image);
    core::buffer& dst = bufs.empty(room);
    auto* t = engine->allocate_decompress(src, dst);
    EXPECT_NE(t, nullptr);
    EXPECT_EQ(engine->submit(*t), status::success);
    const int before = done + failed;
    EXPECT_TRUE(pe.run_until([&] { return done + failed > before; }, std::chrono::seconds(5)));
    out.assign(dst.head(), dst.head() + dst.capacity());
    if (ok(last)) {
      EXPECT_EQ(dst.data_length(), image.size());
    }
    return last;
  }
};

TEST_F(accel_lz4, image_matches_liblz4_frame_blocks_byte_for_byte) {
  make();
  struct sample {
    std::vector<uint8_t> block;
    const char* what;
  };
  std::vector<sample> samples = {
      {test::pattern_bytes(8192), "i mod 256, 8 KiB"},
      {std::vector<uint8_t>(4096, 0), "zeros, 4 KiB"},
      {std::vector<uint8_t>(64, 'z'), "64 bytes"},
      {test::pattern_bytes(65536, 7), "exactly one 64 KiB frame block"},
      {test::pattern_bytes(200 * 1024, 3), "several frame blocks"},
  };
  // Half random, half compressible: the frame's raw-block fallback inside a fitting image.
  auto mixed = test::random_bytes(64 * 1024, 11);
  auto tail = std::vector<uint8_t>(128 * 1024, 0x5A);
  mixed.insert(mixed.end(), tail.begin(), tail.end());
  samples.push_back({mixed, "a raw frame block then compressed ones"});
  for (int i = 0; i < 5; ++i) {
    auto b = test::random_bytes(16384, 100 + i);
    for (size_t j = 0; j < b.size(); ++j)
      if (j % 3 != 0) b[j] = static_cast<uint8_t>(j / 64);  // compressible but not trivial
    samples.push_back({b, "semi-random 16 KiB"});
  }
  for (const auto& s : samples) {
    SCOPED_TRACE(s.what);
    const auto expected = test::reference_image(s.block);
    ASSERT_FALSE(expected.empty());
    std::vector<uint8_t> image;
    ASSERT_EQ(compress(s.block, image), status::success);
    EXPECT_EQ(image, expected);
    std::vector<uint8_t> plain;
    ASSERT_EQ(decompress(image, s.block.size(), plain), status::success);
    EXPECT_EQ(plain, s.block);
  }
}

TEST_F(accel_lz4, image_can_be_built_over_its_own_source) {
  make();
  const auto block = test::pattern_bytes(8192, 5);
  core::buffer& src = bufs.with_data(block);
  core::buffer_inventory inventory(1);
  core::buffer* dst = nullptr;
  ASSERT_EQ(inventory.get_by_addr(src.map(), src.head(), 8192, dst), status::success);
  ASSERT_EQ(engine->submit(*engine->allocate_compress(src, *dst)), status::success);
  pe.progress();
  ASSERT_EQ(done, 1);
  EXPECT_EQ(buffers::data_of(*dst), test::reference_image(block));
  dst->release();
}

TEST_F(accel_lz4, reference_pattern_block_has_the_documented_payload_size) {
  // REFERENCE_SPEC §5.2: 8192 bytes of i mod 256 give C = 302 with liblz4 1.9.4.
  make();
  std::vector<uint8_t> image;
  ASSERT_EQ(compress(test::pattern_bytes(8192), image), status::success);
  EXPECT_EQ(load_be32(image.data()), 8192u);
  EXPECT_EQ(load_be32(image.data() + 4), 302u);
  EXPECT_EQ(load_be32(image.data() + 8192 - 4), 0u);
}

TEST_F(accel_lz4, incompressible_block_fails_with_too_big_and_writes_nothing) {
  make();
  const auto block = test::random_bytes(8192, 1);
  core::buffer& src = bufs.with_data(block);
  core::buffer& dst = bufs.empty(8192);
  auto* t = engine->allocate_compress(src, dst);
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(engine->submit(*t), status::success);
  ASSERT_TRUE(pe.run_until([&] { return failed == 1; }, std::chrono::seconds(5)));
  EXPECT_EQ(last, status::too_big);
  // One raw frame block: 4-byte header 0x80002000 + 8192 bytes (REFERENCE_SPEC §5.2).
  EXPECT_EQ(last_payload, 8196u);
  EXPECT_EQ(dst.data_length(), 0u);
  EXPECT_EQ(std::vector<uint8_t>(dst.head(), dst.head() + 8192), std::vector<uint8_t>(8192, 0xEE));
}

TEST_F(accel_lz4, compress_refuses_bad_sizes) {
  make(4, 8192);
  std::vector<uint8_t> image;
  EXPECT_EQ(compress(std::vector<uint8_t>(11, 0), image), status::invalid_value);     // < 12 bytes
  EXPECT_EQ(compress(std::vector<uint8_t>(16384, 0), image), status::invalid_value);  // > max
  // Destination too small.
  core::buffer& src = bufs.with_data(std::vector<uint8_t>(4096, 0));
  core::buffer& dst = bufs.empty(4095);
  ASSERT_EQ(engine->submit(*engine->allocate_compress(src, dst)), status::success);
  ASSERT_TRUE(pe.run_until([&] { return failed == 3; }, std::chrono::seconds(5)));
  EXPECT_EQ(last, status::invalid_value);
  EXPECT_EQ(dst.data_length(), 0u);
}

class accel_lz4_image : public accel_lz4 {
 protected:
  static constexpr size_t block = 4096;
  std::vector<uint8_t> good;
  core::buffer_inventory inventory{64};
  void SetUp() override {
    make();
    good = test::reference_image(test::pattern_bytes(block));
    ASSERT_FALSE(good.empty());
  }
  // Refused with invalid_value, and nothing written past a destination of exactly `block` bytes
  // (the guard bytes after it stay 0xEE).
  void expect_refused(const std::vector<uint8_t>& image, const char* what) {
    SCOPED_TRACE(what);
    std::vector<uint8_t> out;
    core::buffer& src = bufs.with_data(image);
    // Destination: block bytes of tail room inside a larger guarded region.
    core::buffer& region = bufs.empty(block + 64);
    core::buffer* dst = nullptr;
    ASSERT_EQ(inventory.get_by_addr(region.map(), region.head(), block, dst), status::success);
    auto* t = engine->allocate_decompress(src, *dst);
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(engine->submit(*t), status::success);
    const int before = failed;
    const int before_total = done + failed;
    ASSERT_TRUE(
        pe.run_until([&] { return done + failed > before_total; }, std::chrono::seconds(5)));
    EXPECT_EQ(failed, before + 1);
    EXPECT_EQ(last, status::invalid_value);
    EXPECT_EQ(dst->data_length(), 0u);
    EXPECT_EQ(std::vector<uint8_t>(region.head() + block, region.head() + block + 64),
              std::vector<uint8_t>(64, 0xEE));
    dst->release();
  }
};

TEST_F(accel_lz4_image, every_kind_of_bad_image_is_refused) {
  const uint32_t c = load_be32(good.data() + 4);
  {
    auto img = good;
    img.resize(11);
    expect_refused(img, "shorter than header + trailer");
  }
  {
    auto img = good;
    img.resize(block - 1);
    expect_refused(img, "truncated: original_size says more than there is");
  }
  {
    auto img = good;
    store_be32(img.data(), block * 2);
    expect_refused(img, "original_size too big");
  }
  {
    auto img = good;
    store_be32(img.data(), block - 64);
    expect_refused(img, "original_size too small");
  }
  {
    auto img = good;
    store_be32(img.data() + 4, block - 11);
    expect_refused(img, "compressed_size past the trailer");
  }
  {
    auto img = good;
    store_be32(img.data() + 4, 0xFFFFFFFFu);
    expect_refused(img, "compressed_size huge");
  }
  {
    auto img = good;
    store_be32(img.data() + 4, c - 1);
    expect_refused(img, "compressed_size cuts the last block");
  }
  {
    auto img = good;
    store_be32(img.data() + 4, c + 4);  // 4 zero padding bytes read as an LZ4 block header
    expect_refused(img, "compressed_size covers an end mark");
  }
  {
    auto img = good;
    store_be32(img.data() + 4, c + 2);
    expect_refused(img, "compressed_size leaves a partial block header");
  }
  {
    auto img = good;
    img[block - 1] = 1;
    expect_refused(img, "trailer not 0");
  }
  {
    auto img = good;
    // LE block size larger than what follows inside C.
    img[8] = 0xFF, img[9] = 0x0F, img[10] = 0, img[11] = 0;
    expect_refused(img, "block size past C");
  }
  {
    auto img = good;
    img[8] = 0x01, img[9] = 0x00, img[10] = 0x01, img[11] = 0x00;  // 65537 > 64 KiB
    expect_refused(img, "block over 64 KiB");
  }
  {
    auto img = good;
    img[8] = 0, img[9] = 0, img[10] = 0, img[11] = 0x80;  // raw block of size 0
    expect_refused(img, "empty raw block");
  }
  {
    // A raw block that says it holds more than the destination has room for.
    std::vector<uint8_t> img(block, 0);
    store_be32(img.data(), block);
    const uint32_t raw = block - 12 - 4;
    store_be32(img.data() + 4, raw + 4);
    img[8] = uint8_t(raw), img[9] = uint8_t(raw >> 8), img[10] = 0, img[11] = 0x80;
    expect_refused(img, "raw block short of the block size");
  }
  {
    auto img = good;
    for (size_t i = 12; i < 8 + c; ++i) img[i] ^= 0x5A;
    expect_refused(img, "corrupt LZ4 sequence data");
  }
  {
    auto img = good;
    // First token: a literal run of 15 + 4 x 255 + ... bytes, far more than the block holds.
    img[12] = 0xF0;
    for (size_t i = 13; i < 8 + c; ++i) img[i] = 0xFF;
    expect_refused(img, "literal run past the block");
  }
  {
    std::vector<uint8_t> img(block, 0);
    store_be32(img.data(), block);
    expect_refused(img, "no payload: decompresses to 0 bytes");
  }
  {
    // Two copies of the blocks: decompresses to 2 B, more than original_size.
    auto img = good;
    std::copy(good.begin() + 8, good.begin() + 8 + c, img.begin() + 8 + c);
    store_be32(img.data() + 4, 2 * c);
    expect_refused(img, "decompresses to more than original_size");
  }
  EXPECT_EQ(done, 0);
}

TEST_F(accel_lz4_image, destination_smaller_than_the_block_is_refused) {
  std::vector<uint8_t> out;
  EXPECT_EQ(decompress(good, block - 1, out), status::invalid_value);
  EXPECT_EQ(out, std::vector<uint8_t>(block - 1, 0xEE));
  EXPECT_EQ(decompress(good, block, out), status::success);
}

TEST_F(accel_lz4, pool_exhaustion_and_reuse) {
  make(2);
  core::buffer& src = bufs.with_data(test::pattern_bytes(4096));
  core::buffer& d1 = bufs.empty(4096);
  core::buffer& d2 = bufs.empty(4096);
  auto* a = engine->allocate_compress(src, d1);
  auto* b = engine->allocate_compress(src, d2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(engine->allocate_compress(src, d1), nullptr);
  ASSERT_EQ(engine->submit(*a), status::success);
  ASSERT_EQ(engine->submit(*b), status::success);
  EXPECT_EQ(engine->allocate_compress(src, d1), nullptr);
  pe.progress();
  EXPECT_EQ(done, 2);  // the callbacks freed them
  EXPECT_NE(engine->allocate_compress(src, d1), nullptr);
}

TEST_F(accel_lz4, tasks_complete_only_inside_progress) {
  make();
  core::buffer& src = bufs.with_data(test::pattern_bytes(4096));
  core::buffer& dst = bufs.empty(4096);
  ASSERT_EQ(engine->submit(*engine->allocate_compress(src, dst)), status::success);
  EXPECT_EQ(done, 0);
  EXPECT_EQ(dst.data_length(), 0u);  // not even run yet
  EXPECT_EQ(engine->inflight(), 1u);
  EXPECT_FALSE(engine->arm());  // queued work: the engine must not sleep
  EXPECT_TRUE(pe.progress());
  EXPECT_EQ(done, 1);
  EXPECT_EQ(engine->inflight(), 0u);
  EXPECT_TRUE(engine->arm());
}

TEST_F(accel_lz4, submit_before_start_is_bad_state_and_stop_flushes_queued_tasks) {
  engine = std::make_unique<lz4_engine>(
      pe,
      lz4_engine_config{.compress_tasks = 2,
                        .decompress_tasks = 0,
                        .max_block_size = 4096,
                        .on_compress_done = [this](lz4_compress_task& t) { finish(t, true); },
                        .on_compress_error = [this](lz4_compress_task& t) { finish(t, false); }});
  core::buffer& src = bufs.with_data(test::pattern_bytes(4096));
  core::buffer& dst = bufs.empty(4096);
  auto* t = engine->allocate_compress(src, dst);
  EXPECT_EQ(engine->submit(*t), status::bad_state);
  EXPECT_EQ(engine->allocate_decompress(src, dst), nullptr);  // none configured
  ASSERT_EQ(engine->start(), status::success);
  ASSERT_EQ(engine->submit(*t), status::success);
  ASSERT_EQ(engine->stop(), status::success);
  EXPECT_EQ(engine->state(), core::context_state::stopping);
  pe.progress();
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(last, status::shutdown);
  EXPECT_EQ(engine->state(), core::context_state::idle);
  EXPECT_EQ(dst.data_length(), 0u);
}

TEST(accel_lz4_config, bad_configurations_are_refused) {
  core::progress_engine pe{core::poll_mode::busy};
  EXPECT_THROW(lz4_engine(pe, {.compress_tasks = 0, .decompress_tasks = 0}), status_error);
  EXPECT_THROW(lz4_engine(pe, {.max_block_size = 11}), status_error);
}

}  // namespace
}  // namespace zc::accel
