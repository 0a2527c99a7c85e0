#include "strategy.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <vector>

#include "core/status.hpp"

namespace zc::initiator {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;

// Every offset a worker's ring hands out while it rotates a few times round.
std::set<uint64_t> offsets_reached(offset_ring ring) {
  std::set<uint64_t> seen;
  for (std::size_t i = 0; i < 3 * ring.capacity(); ++i) {
    auto o = ring.pop();
    if (!o) break;
    seen.insert(*o);
    ring.push(*o);
  }
  return seen;
}

plan_request throughput(uint64_t capacity, uint32_t block_size, uint32_t workers) {
  plan_request r;
  r.strategy = execution_strategy::read_throughput_test;
  r.storage_capacity = capacity;
  r.block_size = block_size;
  r.worker_count = workers;
  r.transaction_count = 64;
  r.run_limit = 1000;
  return r;
}

std::string message_of(const plan_request& request, const std::string& path = "") {
  try {
    execution_plan plan(request, path);
  } catch (const status_error& e) {
    return e.what();
  }
  return "";
}

TEST(initiator_strategy, each_mode_runs_its_references_steps) {
  EXPECT_THAT(steps_of(execution_strategy::read_throughput_test),
              ElementsAre(step::read, step::finish));
  EXPECT_THAT(steps_of(execution_strategy::write_throughput_test),
              ElementsAre(step::write, step::finish));
  EXPECT_THAT(steps_of(execution_strategy::read_only_data_validity_test),
              ElementsAre(step::clear, step::read, step::validate, step::finish));
  EXPECT_THAT(steps_of(execution_strategy::read_write_data_validity_test),
              ElementsAre(step::copy_expected, step::write, step::clear, step::read, step::validate,
                          step::finish));
}

TEST(initiator_strategy, one_worker_gets_everything) {
  auto s = slice_workers(10, 20, 4096, 1, 64);
  EXPECT_THAT(s, ElementsAre(worker_slice{0, 10, 0, 20, 10}));
}

TEST(initiator_strategy, remainders_go_to_the_first_workers_and_slices_are_contiguous) {
  EXPECT_THAT(slice_workers(11, 11, 100, 2, 64),
              ElementsAre(worker_slice{0, 6, 0, 6, 6}, worker_slice{600, 5, 600, 5, 5}));
  EXPECT_THAT(slice_workers(10, 11, 100, 3, 64),
              ElementsAre(worker_slice{0, 4, 0, 4, 4}, worker_slice{400, 3, 400, 4, 3},
                          worker_slice{700, 3, 800, 3, 3}));
}

TEST(initiator_strategy, transactions_per_worker_are_bounded_by_both_slices) {
  // T_i = min(T, local blocks, storage blocks).
  EXPECT_THAT(slice_workers(4, 100, 1, 2, 64),
              ElementsAre(worker_slice{0, 2, 0, 50, 2}, worker_slice{2, 2, 50, 50, 2}));
  EXPECT_THAT(slice_workers(100, 100, 1, 2, 8),
              ElementsAre(worker_slice{0, 50, 0, 50, 8}, worker_slice{50, 50, 50, 50, 8}));
}

TEST(initiator_strategy, every_storage_block_is_reachable_when_local_is_smaller) {
  // The reference filled the storage ring from the local count: here 2 of 5 blocks per worker.
  plan_request r = throughput(10 * 4096, 4096, 2);
  r.local_io_region_size = 4 * 4096;
  execution_plan plan(r, "");
  std::set<uint64_t> storage;
  std::set<uint64_t> local;
  for (std::size_t w = 0; w < 2; ++w) {
    EXPECT_EQ(plan.storage_offsets(w).size(), 5u);
    EXPECT_EQ(plan.local_offsets(w).size(), 2u);
    storage.merge(offsets_reached(plan.storage_offsets(w)));
    local.merge(offsets_reached(plan.local_offsets(w)));
  }
  std::set<uint64_t> all_storage;
  for (uint64_t i = 0; i < 10; ++i) all_storage.insert(i * 4096);
  EXPECT_EQ(storage, all_storage);
  EXPECT_EQ(local, (std::set<uint64_t>{0, 4096, 8192, 12288}));
}

TEST(initiator_strategy, every_local_block_is_used_when_storage_is_smaller) {
  plan_request r = throughput(3 * 512, 512, 3);
  r.local_io_region_size = 7 * 512 + 100;  // the partial block at the end is ignored
  execution_plan plan(r, "");
  EXPECT_EQ(plan.local_region_size(), 7u * 512 + 100);
  std::set<uint64_t> local;
  std::set<uint64_t> storage;
  for (std::size_t w = 0; w < 3; ++w) {
    EXPECT_EQ(plan.workers()[w].transaction_count, 1u);
    local.merge(offsets_reached(plan.local_offsets(w)));
    storage.merge(offsets_reached(plan.storage_offsets(w)));
  }
  EXPECT_EQ(local.size(), 7u);
  EXPECT_EQ(*local.rbegin(), 6u * 512);
  EXPECT_EQ(storage, (std::set<uint64_t>{0, 512, 1024}));
}

TEST(initiator_strategy, sizes_beyond_4_gib_do_not_wrap) {
  // The reference computed per-worker segment sizes in 32 bits.
  const uint64_t capacity = uint64_t(24) << 30;
  execution_plan plan(throughput(capacity, 4096, 3), "");
  ASSERT_EQ(plan.workers().size(), 3u);
  EXPECT_EQ(plan.workers()[1].storage_offset, uint64_t(8) << 30);
  EXPECT_EQ(plan.workers()[2].local_offset, uint64_t(16) << 30);
  const auto& last = plan.workers()[2];
  EXPECT_EQ(last.storage_offset + last.storage_blocks * plan.io_size(), capacity);
  EXPECT_EQ(plan.local_region_size(), capacity);
}

TEST(initiator_strategy, too_small_regions_are_refused_with_a_clear_message) {
  plan_request r = throughput(4 * 4096, 4096, 3);
  r.local_io_region_size = 2 * 4096;
  EXPECT_THAT(message_of(r), HasSubstr("Local IO region is too small to give each worker at "
                                       "least one block each"));
  r.local_io_region_size = 10 * 4096;
  r.storage_capacity = 2 * 4096 + 4095;
  EXPECT_THAT(message_of(r), HasSubstr("Storage IO region is too small to give each worker at "
                                       "least one block each"));
  r.storage_capacity = 3 * 4096;
  EXPECT_EQ(message_of(r), "");
}

TEST(initiator_strategy, impossible_geometry_is_refused) {
  plan_request r = throughput(1 << 20, 4096, 1);
  r.blocks_per_io = 0;
  EXPECT_THAT(message_of(r), HasSubstr("blocks-per-io must be between 1 and 65535"));
  r.blocks_per_io = 65536;
  EXPECT_THAT(message_of(r), HasSubstr("blocks-per-io must be between 1 and 65535"));
  r.blocks_per_io = 65535;  // 65535 x 1 MiB does not fit io_size's 32 bits
  r.block_size = 1 << 20;
  r.storage_capacity = uint64_t(1) << 40;
  EXPECT_THAT(message_of(r), HasSubstr("does not fit the 32-bit io_size"));
  r = throughput(1 << 20, 0, 1);
  EXPECT_THAT(message_of(r), HasSubstr("block size of 0"));
  r = throughput(1 << 20, 4096, 0);
  EXPECT_THAT(message_of(r), HasSubstr("at least one worker"));
}

TEST(initiator_strategy, k_blocks_per_io_make_each_io_k_blocks_long) {
  plan_request r = throughput(10 * 4 * 512 + 1000, 512, 2);
  r.blocks_per_io = 4;
  r.transaction_count = 3;
  execution_plan plan(r, "");
  EXPECT_EQ(plan.io_size(), 2048u);
  EXPECT_EQ(plan.transaction_count(), 3u);
  EXPECT_THAT(plan.workers(),
              ElementsAre(worker_slice{0, 5, 0, 5, 3}, worker_slice{10240, 5, 10240, 5, 3}));
  auto ring = plan.storage_offsets(1);
  std::vector<uint64_t> order;
  while (auto o = ring.pop()) order.push_back(*o);
  EXPECT_THAT(order, ElementsAre(10240, 12288, 14336, 16384, 18432));
}

TEST(initiator_strategy, run_limit_below_transaction_count_bounds_transactions) {
  plan_request r = throughput(100 * 4096, 4096, 1);
  r.transaction_count = 64;
  r.run_limit = 5;
  execution_plan plan(r, "");
  EXPECT_EQ(plan.transaction_count(), 5u);
  EXPECT_EQ(plan.workers()[0].transaction_count, 5u);
}

TEST(initiator_strategy, rings_are_fifo_and_rotate_round_robin) {
  offset_ring ring(1000, 10, 4);
  EXPECT_EQ(ring.size(), 4u);
  EXPECT_FALSE(ring.push(7)) << "a full ring takes nothing more";
  auto a = ring.pop(), b = ring.pop(), c = ring.pop();
  EXPECT_EQ(*a, 1000u);
  EXPECT_EQ(*b, 1010u);
  EXPECT_EQ(*c, 1020u);
  // Returned out of order: they come back in the order they were returned, after 1030.
  ring.push(*c);
  ring.push(*a);
  EXPECT_EQ(*ring.pop(), 1030u);
  EXPECT_EQ(*ring.pop(), 1020u);
  EXPECT_EQ(*ring.pop(), 1000u);
  EXPECT_FALSE(ring.pop()) << "b is still in use";
  EXPECT_TRUE(ring.empty());
  ring.push(*b);
  EXPECT_EQ(*ring.pop(), 1010u);
}

TEST(initiator_strategy, the_pattern_is_byte_i_mod_256_at_any_offset) {
  auto content = expected_content::pattern(1 << 20);
  std::vector<std::byte> buf(700);
  content.copy_to(1000, buf);
  for (std::size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], std::byte((1000 + i) % 256)) << i;
  EXPECT_FALSE(content.compare(1000, buf));
}

TEST(initiator_strategy, a_mismatch_report_names_the_offsets_and_the_bytes) {
  plan_request r = throughput(1 << 20, 4096, 1);
  r.strategy = execution_strategy::read_write_data_validity_test;
  execution_plan plan(r, "");
  ASSERT_NE(plan.expected(), nullptr);
  std::vector<std::byte> local(4096);
  plan.expected()->copy_to(8192, local);
  EXPECT_FALSE(plan.validate(local, 8192));
  local[300] = std::byte{0xFF};
  local[302] = std::byte{0x00};
  auto report = plan.validate(local, 8192);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->storage_offset, 8192u);
  EXPECT_EQ(report->first_difference, 300u);
  // (8192 + 300) mod 256 = 0x2C.
  EXPECT_EQ(report->expected_hex, "2C 2D 2E 2F 30 31 32 33 34 35 36 37 38 39 3A 3B");
  EXPECT_EQ(report->actual_hex, "FF 2D 00 2F 30 31 32 33 34 35 36 37 38 39 3A 3B");
  EXPECT_THAT(report->message(),
              HasSubstr("Memory read from storage target does not match expected value"));
  EXPECT_THAT(report->message(), HasSubstr("storage offset 0x2000"));
  // The last byte of the IO: only one byte left to show.
  plan.expected()->copy_to(8192, local);
  local[4095] = std::byte{0xAB};
  report = plan.validate(local, 8192);
  ASSERT_TRUE(report);
  EXPECT_EQ(report->first_difference, 4095u);
  EXPECT_EQ(report->expected_hex, "FF");
  EXPECT_EQ(report->actual_hex, "AB");
}

TEST(initiator_strategy, a_range_beyond_the_storage_is_a_mismatch_not_an_overread) {
  auto content = expected_content::pattern(4096);
  std::vector<std::byte> local(512);
  EXPECT_TRUE(content.compare(4096 - 256, local));
}

class plain_file : public testing::Test {
 protected:
  void write(std::size_t size) {
    std::ofstream out(path_, std::ios::binary);
    for (std::size_t i = 0; i < size; ++i) out.put(static_cast<char>((i * 7 + 3) % 251));
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::string path_ = (std::filesystem::temp_directory_path() /
                       ("zc_initiator_plain_" + std::to_string(::getpid()) + ".bin"))
                          .string();
};

TEST_F(plain_file, the_file_is_the_expected_content) {
  write(8192);
  plan_request r = throughput(8192, 4096, 1);
  r.strategy = execution_strategy::read_only_data_validity_test;
  execution_plan plan(r, path_);
  std::vector<std::byte> local(4096);
  for (std::size_t i = 0; i < local.size(); ++i) local[i] = std::byte(((4096 + i) * 7 + 3) % 251);
  EXPECT_FALSE(plan.validate(local, 4096));
  EXPECT_TRUE(plan.validate(local, 0));
}

TEST_F(plain_file, a_file_of_another_size_is_refused_with_the_references_text) {
  write(100);
  plan_request r = throughput(8192, 4096, 1);
  r.strategy = execution_strategy::read_write_data_validity_test;
  EXPECT_EQ(message_of(r, path_),
            "Validation tests require that the plain data: 100 size is the same as the storage "
            "capacity: 8192");
}

TEST(initiator_strategy, read_only_validity_needs_a_file_and_throughput_tests_ignore_it) {
  plan_request r = throughput(8192, 4096, 1);
  r.strategy = execution_strategy::read_only_data_validity_test;
  EXPECT_THAT(message_of(r), HasSubstr("requires plain data file"));
  r.strategy = execution_strategy::read_throughput_test;
  execution_plan plan(r, "/nonexistent/plain.bin");
  EXPECT_EQ(plan.expected(), nullptr);
  std::vector<std::byte> local(4096, std::byte{1});
  EXPECT_FALSE(plan.validate(local, 0));
  r.strategy = execution_strategy::read_write_data_validity_test;
  EXPECT_THAT(message_of(r, "/nonexistent/plain.bin"), HasSubstr("cannot read plain data file"));
}

}  // namespace
}  // namespace zc::initiator
