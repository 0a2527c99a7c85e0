// dma_engine: the copy, the destination bound, overlap inside one region, the task model.
#include "accel/dma_engine.hpp"

#include <gtest/gtest.h>

#include "core/progress_engine.hpp"
#include "unit/accel/accel_test_support.hpp"

namespace zc::accel {
namespace {

using test::buffers;

TEST(accel_dma, memcpy_appends_the_source_at_the_destination_tail) {
  core::progress_engine pe{core::poll_mode::busy};
  int done = 0, failed = 0;
  status last = status::success;
  dma_engine dma(pe, {.memcpy_tasks = 1,
                      .on_memcpy_done =
                          [&](dma_memcpy_task& t) {
                            ++done;
                            t.free();
                          },
                      .on_memcpy_error =
                          [&](dma_memcpy_task& t) {
                            ++failed;
                            last = t.result();
                            t.free();
                          }});
  buffers bufs;
  const auto bytes = test::random_bytes(4096, 9);
  core::buffer& src = bufs.with_data(bytes);
  core::buffer& dst = bufs.empty(4096);
  auto* t = dma.allocate_memcpy(src, dst);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(dma.submit(*t), status::bad_state);  // not started
  ASSERT_EQ(dma.start(), status::success);
  EXPECT_EQ(dma.allocate_memcpy(src, dst), nullptr);  // the only task is taken
  ASSERT_EQ(dma.submit(*t), status::success);
  EXPECT_EQ(dst.data_length(), 0u);
  pe.progress();
  EXPECT_EQ(done, 1);
  EXPECT_EQ(buffers::data_of(dst), bytes);

  core::buffer& small = bufs.empty(4095);
  ASSERT_EQ(dma.submit(*dma.allocate_memcpy(src, small)), status::success);
  pe.progress();
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(last, status::invalid_value);
  EXPECT_EQ(small.data_length(), 0u);
  dma.stop();
}

TEST(accel_dma, zero_tasks_is_a_bad_config) {
  core::progress_engine pe{core::poll_mode::busy};
  EXPECT_THROW(dma_engine(pe, {.memcpy_tasks = 0}), status_error);
}

}  // namespace
}  // namespace zc::accel
