// The engines' data path (allocate, submit, run inside progress(), callback, free) makes no heap
// allocation through operator new on the calling thread.
#include <gtest/gtest.h>

#include "accel/dma_engine.hpp"
#include "accel/ec_engine.hpp"
#include "accel/lz4_engine.hpp"
#include "core/progress_engine.hpp"
#include "support/allocation_counter.hpp"
#include "unit/accel/accel_test_support.hpp"

namespace zc::accel {
namespace {

TEST(accel_data_path, no_allocation_per_task) {
  core::progress_engine pe{core::poll_mode::busy};
  int done = 0;
  auto count = [&](core::task_base& t) {
    ++done;
    t.free();
  };
  lz4_engine lz4(pe, {.compress_tasks = 1,
                      .decompress_tasks = 1,
                      .max_block_size = 8192,
                      .on_compress_done = count,
                      .on_compress_error = count,
                      .on_decompress_done = count,
                      .on_decompress_error = count});
  ec_engine ec(pe, {.create_tasks = 1,
                    .recover_tasks = 1,
                    .on_create_done = count,
                    .on_create_error = count,
                    .on_recover_done = count,
                    .on_recover_error = count});
  dma_engine dma(pe, {.memcpy_tasks = 1, .on_memcpy_done = count, .on_memcpy_error = count});
  ASSERT_EQ(lz4.start(), status::success);
  ASSERT_EQ(ec.start(), status::success);
  ASSERT_EQ(dma.start(), status::success);
  test::buffers bufs;
  core::buffer& plain = bufs.with_data(test::pattern_bytes(8192));
  core::buffer& image = bufs.empty(8192);
  core::buffer& back = bufs.empty(8192);
  core::buffer& half_1 = bufs.with_data(test::random_bytes(4096, 1));
  core::buffer& half_2 = bufs.with_data(test::random_bytes(4096, 2));
  core::buffer& parity = bufs.empty(4096);
  core::buffer& rebuilt = bufs.empty(4096);
  core::buffer& copy = bufs.empty(8192);

  const uint64_t before = zc::test::allocations_on_this_thread();
  for (int round = 0; round < 3; ++round) {
    image.set_data(image.head(), 0);
    back.set_data(back.head(), 0);
    parity.set_data(parity.head(), 0);
    rebuilt.set_data(rebuilt.head(), 0);
    copy.set_data(copy.head(), 0);
    ASSERT_EQ(lz4.submit(*lz4.allocate_compress(plain, image)), status::success);
    ASSERT_EQ(ec.submit(*ec.allocate_create(ec_matrix::cauchy, half_1, half_2, parity)),
              status::success);
    ASSERT_EQ(dma.submit(*dma.allocate_memcpy(plain, copy)), status::success);
    pe.progress();
    ASSERT_EQ(lz4.submit(*lz4.allocate_decompress(image, back)), status::success);
    ASSERT_EQ(ec.submit(*ec.allocate_recover(ec_matrix::cauchy, 0, half_2, parity, rebuilt)),
              status::success);
    pe.progress();
  }
  const uint64_t after = zc::test::allocations_on_this_thread();
  EXPECT_EQ(after, before);
  EXPECT_EQ(done, 15);
  EXPECT_EQ(back.data_length(), 8192u);
  EXPECT_EQ(0, std::memcmp(back.data(), plain.data(), 8192));
  EXPECT_EQ(0, std::memcmp(rebuilt.data(), half_1.data(), 4096));
  lz4.stop();
  ec.stop();
  dma.stop();
}

}  // namespace
}  // namespace zc::accel
