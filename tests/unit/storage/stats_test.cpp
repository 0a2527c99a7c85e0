#include "storage/stats.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace zc::storage {
namespace {

const std::string rule = "+================================================+";

TEST(stats, rule_is_the_reference_line) {
  EXPECT_EQ(stats_rule, rule);
  EXPECT_EQ(stats_rule.size(), 50u);
}

TEST(stats, pe_hit_rate_uses_the_reference_format) {
  EXPECT_EQ(format_pe_hit_rate(19, 1), "95.000% (19:1)");
  EXPECT_EQ(format_pe_hit_rate(1, 2), "33.333% (1:2)");
  EXPECT_EQ(format_pe_hit_rate(1, 0), "100.000% (1:0)");
  EXPECT_EQ(format_pe_hit_rate(1, 999), "0.100% (1:999)");
  EXPECT_EQ(format_pe_hit_rate(0, 5), "0.000% (0:5)");
  // The reference printed -nan here.
  EXPECT_EQ(format_pe_hit_rate(0, 0), "0.000% (0:0)");
}

TEST(stats, target_core_block) {
  const core_stats s{3, 1000, std::nullopt, 750, 250};
  EXPECT_EQ(format_core_stats(s), rule +
                                      "\n"
                                      "| Core: 3\n"
                                      "| Operation count: 1000\n"
                                      "| PE hit rate: 75.000% (750:250)\n");
}

TEST(stats, gga_core_block_has_the_recovery_count) {
  const core_stats s{0, 42, 7, 1, 1};
  EXPECT_EQ(format_core_stats(s), rule +
                                      "\n"
                                      "| Core: 0\n"
                                      "| Operation count: 42\n"
                                      "| Recovery count: 7\n"
                                      "| PE hit rate: 50.000% (1:1)\n");
}

TEST(stats, gga_v2_core_block_has_the_rebuilds_and_the_integrity_counts) {
  core_stats s{0, 42, 7, 1, 1, block_integrity{40, 2, 1, 5, 3}, 4};
  EXPECT_EQ(format_core_stats(s), rule +
                                      "\n"
                                      "| Core: 0\n"
                                      "| Operation count: 42\n"
                                      "| Recovery count: 7\n"
                                      "| Degraded rebuilds: 4\n"
                                      "| Verified reads: 40\n"
                                      "| Repaired slots: 2\n"
                                      "| Unrecoverable reads: 1\n"
                                      "| Raw writes: 5\n"
                                      "| Degraded writes: 3\n"
                                      "| PE hit rate: 50.000% (1:1)\n");
}

TEST(stats, every_core_gets_a_block) {
  const std::vector<core_stats> cores = {{0, 1, std::nullopt, 1, 0}, {1, 2, std::nullopt, 0, 1}};
  EXPECT_EQ(format_core_stats(cores), rule +
                                          "\n| Core: 0\n| Operation count: 1\n"
                                          "| PE hit rate: 100.000% (1:0)\n" +
                                          rule +
                                          "\n| Core: 1\n| Operation count: 2\n"
                                          "| PE hit rate: 0.000% (0:1)\n");
  EXPECT_EQ(format_core_stats(std::vector<core_stats>{}), "");
}

TEST(stats, initiator_block) {
  initiator_stats s;
  s.duration_seconds = 2.0;
  s.operation_count = 1'000'000;
  s.io_size = 4096;
  s.pe_hits = 3;
  s.pe_misses = 1;
  s.latency_min_us = 5;
  s.latency_max_us = 120;
  s.latency_total_us = 25'000'001;  // mean is integer division: 25
  EXPECT_EQ(format_initiator_stats(s), rule +
                                           "\n"
                                           "| Stats\n" +
                                           rule +
                                           "\n"
                                           "| Duration (seconds): 2.000000\n"
                                           "| Operation count: 1000000\n"
                                           "| Data rate: 1.907 GiB/s\n"
                                           "| IO rate: 0.500 MIOP/s\n"
                                           "| PE hit rate: 75.000% (3:1)\n"
                                           "| Latency:\n"
                                           "| \tMin: 5us\n"
                                           "| \tMax: 120us\n"
                                           "| \tMean: 25us\n" +
                                           rule + "\n");
}

TEST(stats, initiator_block_with_nothing_done_has_no_nan) {
  const std::string text = format_initiator_stats({});
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
  EXPECT_NE(text.find("| Duration (seconds): 0.000000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("| \tMean: 0us\n"), std::string::npos) << text;
}

TEST(stats, failed_run_block) {
  EXPECT_EQ(format_test_failed(), rule + "\n| Test failed!!\n" + rule + "\n");
}

}  // namespace
}  // namespace zc::storage
