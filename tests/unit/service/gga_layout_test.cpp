#include "service/gga_layout.hpp"

#include <gtest/gtest.h>

#include "service/gga_session.hpp"

namespace zc::service {
namespace {

using storage::message;
using storage::message_type;

TEST(gga_layout, the_host_sees_twice_the_capacity_and_block_size) {
  const gga_geometry g = double_geometry(4096 * 256, 4096);
  EXPECT_EQ(g.capacity, 2u * 4096 * 256);
  EXPECT_EQ(g.block_size, 8192u);
  EXPECT_EQ(g.half(), 4096u);
  EXPECT_EQ(g.blocks(), 256u);
}

TEST(gga_layout, geometry_that_cannot_be_doubled_is_refused) {
  EXPECT_THROW(double_geometry(4096, 0), status_error);
  EXPECT_THROW(double_geometry(0, 4096), status_error);
  EXPECT_THROW(double_geometry(4096 * 3 + 1, 4096), status_error);
  EXPECT_THROW(double_geometry(uint64_t(1) << 40, 0x80000000u), status_error);
  // Blocks the codec cannot take: twice 16 bytes is below gga_min_block_size; 32 is the least.
  EXPECT_THROW(double_geometry(16 * 8, 16), status_error);
  EXPECT_EQ(double_geometry(32 * 8, 32).block_size, gga_min_block_size);
  EXPECT_THROW(double_geometry(UINT64_MAX - (UINT64_MAX % 4096), 4096), status_error);
}

TEST(gga_layout, format_v2_gives_the_host_the_blocks_that_fit_the_slots) {
  // 66 target blocks of 4096: the last is the label's, 65 * 4096 / 4112 = 64.7 slots.
  const gga_geometry g = double_geometry(4096 * 66, 4096, accel::gga_format::v2);
  EXPECT_EQ(g.block_size, 8192u);
  EXPECT_EQ(g.blocks(), 64u);
  EXPECT_EQ(g.capacity, 64u * 8192);
  EXPECT_EQ(g.slots().slot(), 4112u);
  EXPECT_TRUE(g.verified());
  EXPECT_FALSE(double_geometry(4096 * 66, 4096).verified());
  // Next to the label, one block of H cannot hold a slot of H + 16; two can.
  EXPECT_THROW(double_geometry(4096 * 2, 4096, accel::gga_format::v2), status_error);
  EXPECT_EQ(double_geometry(4096 * 3, 4096, accel::gga_format::v2).blocks(), 1u);
}

TEST(gga_layout, v2_chunk_holds_the_three_slots_as_the_targets_store_them) {
  const gga_chunk_layout c{8192, 16};
  // e1 | D1 D2 | e2   ep | P: the image D1|D2 contiguous.
  EXPECT_EQ(c.entry_at(0), 0u);
  EXPECT_EQ(c.d1(), 16u);
  EXPECT_EQ(c.image(), 16u);
  EXPECT_EQ(c.slot_at(1), 4112u);
  EXPECT_EQ(c.d2(), 4112u);
  EXPECT_EQ(c.entry_at(1), 8208u);
  EXPECT_EQ(c.slot_at(2), 8224u);
  EXPECT_EQ(c.entry_at(2), 8224u);
  EXPECT_EQ(c.parity(), 8240u);
  EXPECT_EQ(c.size(), 3u * 4112);
  const gga_geometry g{8192 * 16, 8192, 16};
  auto p = plan_host_io(g, 8192 * 16, 8192 * 2, 0, 8192 * 3);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->target_offset, 3u * 4112);  // (storage_offset / B) * S
}

TEST(gga_layout, write_generations_only_grow) {
  uint64_t last = gga_next_generation();
  EXPECT_GT(last, uint64_t(1) << 60);  // nanoseconds since 1970: far past 2^60 today
  for (int i = 0; i < 1000; ++i) {
    const uint64_t g = gga_next_generation();
    ASSERT_GT(g, last);
    last = g;
  }
}

TEST(gga_layout, chunk_is_d1_d2_parity_in_one_and_a_half_blocks) {
  const gga_chunk_layout c{8192};
  EXPECT_EQ(c.d1(), 0u);
  EXPECT_EQ(c.d2(), 4096u);
  EXPECT_EQ(c.parity(), 8192u);
  EXPECT_EQ(c.size(), 12288u);
  // Worker w, transaction t of N: (w * N + t) * chunk.
  EXPECT_EQ(gga_chunk_offset(2, 128, 5, c), (2u * 128 + 5) * 12288u);
}

TEST(gga_layout, region_size_is_computed_in_64_bits_and_bounded) {
  const gga_chunk_layout c{0x10000000};  // 256 MiB blocks: 32-bit arithmetic would overflow
  EXPECT_EQ(gga_region_size(2, 4, c, UINT64_MAX), uint64_t(8) * c.size());
  EXPECT_THROW(gga_region_size(3, 4, c, uint64_t(1) << 32), status_error);  // 4.5 GiB
  EXPECT_THROW(
      gga_region_size(UINT32_MAX, UINT32_MAX, gga_chunk_layout{UINT32_MAX - 1}, UINT64_MAX),
      status_error);
}

TEST(gga_layout, a_multi_block_io_maps_to_consecutive_halves) {
  const gga_geometry g{8192 * 16, 8192};
  auto p = plan_host_io(g, 8192 * 16, 8192 * 4, 8192 * 2, 8192 * 8);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->blocks, 4u);
  EXPECT_EQ(p->host_offset, 8192u * 2);
  EXPECT_EQ(p->target_offset, 4096u * 8);  // (storage_offset / B) * H
}

TEST(gga_layout, host_ios_outside_the_storage_or_region_or_not_whole_blocks_are_refused) {
  const gga_geometry g{8192 * 16, 8192};
  std::string why;
  EXPECT_FALSE(plan_host_io(g, 8192 * 16, 0, 0, 0, &why));  // the reference wrapped to 256 blocks
  EXPECT_FALSE(plan_host_io(g, 8192 * 16, 4096, 0, 0, &why));
  EXPECT_FALSE(plan_host_io(g, 8192 * 16, 8192, 0, 100, &why));
  EXPECT_FALSE(plan_host_io(g, 8192 * 16, 8192, 0, 8192 * 16, &why));
  EXPECT_FALSE(plan_host_io(g, 8192 * 16, 8192 * 2, 0, 8192 * 15, &why));
  EXPECT_FALSE(plan_host_io(g, 8192, 8192, 1, 0, &why));
  EXPECT_FALSE(plan_host_io(g, 8192, 8192, UINT64_MAX - 100, 0, &why));
  EXPECT_FALSE(plan_host_io(g, 8192 * 16, 8192, 0, UINT64_MAX - 8191, &why));
  EXPECT_NE(why, "");
  const gga_geometry big{uint64_t(8192) * (gga_max_blocks_per_io + 1), 8192};
  EXPECT_FALSE(plan_host_io(big, big.capacity, 8192 * (gga_max_blocks_per_io + 1), 0, 0, &why));
  EXPECT_TRUE(plan_host_io(big, big.capacity, 8192 * gga_max_blocks_per_io, 0, 0, &why));
}

TEST(gga_layout, recovery_every_n_counts_block_reads_and_alternates_the_lost_half) {
  gga_recovery_trigger off(0);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(off.tick());
  gga_recovery_trigger every3(3);
  std::vector<bool> got;
  for (int i = 0; i < 6; ++i) got.push_back(every3.tick());
  EXPECT_EQ(got, (std::vector<bool>{false, false, true, false, false, true}));
  // Counts over 16 bits do not wrap (the reference stored them in 16 bits).
  gga_recovery_trigger big(70000);
  for (int i = 0; i < 69999; ++i) ASSERT_FALSE(big.tick());
  EXPECT_TRUE(big.tick());
  EXPECT_EQ(gga_lost_half(1), 1u);  // odd: data_2 lost
  EXPECT_EQ(gga_lost_half(2), 0u);  // even: data_1 lost
}

message query_answer(uint64_t capacity, uint32_t block) {
  return {message_type::query_storage_response, 0, 0,
          storage::query_storage_response_payload{capacity, block}};
}

TEST(gga_session, three_matching_targets_give_the_doubled_geometry) {
  const auto g = agree_geometry(
      {query_answer(1 << 20, 4096), query_answer(1 << 20, 4096), query_answer(1 << 20, 4096)},
      accel::gga_format::v1);
  EXPECT_EQ(g.capacity, 2u << 20);
  EXPECT_EQ(g.block_size, 8192u);
  // v2: 256 target blocks of 4096 hold floor(255 * 4096 / 4112) = 254 slots.
  const auto g2 = agree_geometry(
      {query_answer(1 << 20, 4096), query_answer(1 << 20, 4096), query_answer(1 << 20, 4096)},
      accel::gga_format::v2);
  EXPECT_EQ(g2.capacity, 254u * 8192);
  EXPECT_EQ(g2.block_size, 8192u);
  EXPECT_EQ(g2.entry, accel::gga_entry_size);
}

TEST(gga_session, mismatched_targets_are_refused_with_the_reference_texts) {
  try {
    agree_geometry(
        {query_answer(1 << 20, 4096), query_answer(1 << 21, 4096), query_answer(1 << 20, 4096)},
        accel::gga_format::v2);
    FAIL();
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::bad_state);
    EXPECT_STREQ(e.what(), "Mismatch in storage capacity: 1048576 vs 2097152");
  }
  try {
    agree_geometry(
        {query_answer(1 << 20, 4096), query_answer(1 << 20, 4096), query_answer(1 << 20, 2048)},
        accel::gga_format::v2);
    FAIL();
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::bad_state);
    EXPECT_STREQ(e.what(), "Mismatch in block_size: 4096 vs 2048");
  }
}

TEST(gga_session, a_target_error_or_wrong_answer_is_passed_on) {
  try {
    agree_geometry({query_answer(1 << 20, 4096),
                    {message_type::error_response, 0, 0,
                     storage::error_response_payload{status::io_failed, "disk on fire"}},
                    query_answer(1 << 20, 4096)},
                   accel::gga_format::v2);
    FAIL();
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::io_failed);
    EXPECT_STREQ(e.what(), "disk on fire");
  }
  try {
    agree_geometry({query_answer(1 << 20, 4096),
                    {message_type::start_storage_response, 0, 0, storage::empty_payload{}},
                    query_answer(1 << 20, 4096)},
                   accel::gga_format::v2);
    FAIL();
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::unexpected);
  }
}

}  // namespace
}  // namespace zc::service
