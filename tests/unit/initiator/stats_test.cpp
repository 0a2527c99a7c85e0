#include "stats.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

namespace zc::initiator {
namespace {

using namespace std::chrono_literals;

run_summary known_summary() {
  run_summary s;
  s.duration_seconds = 2.5;
  s.operation_count = 1'000'000;
  s.io_size = 4096;
  s.pe_hits = 950;
  s.pe_misses = 50;
  s.latency_min_us = 10;
  s.latency_max_us = 900;
  s.latency_mean_us = 25;
  s.latency_p50_us = 20;
  s.latency_p99_us = 500;
  s.latency_p999_us = 800;
  return s;
}

TEST(initiator_stats, the_block_is_the_references_plus_percentiles) {
  // 10^6 x 4096 B / 2^30 / 2.5 s = 1.5259 GiB/s; 10^6 / 10^6 / 2.5 s = 0.4 MIOP/s.
  EXPECT_EQ(format_run_stats(known_summary()),
            "+================================================+\n"
            "| Stats\n"
            "+================================================+\n"
            "| Duration (seconds): 2.500000\n"
            "| Operation count: 1000000\n"
            "| Data rate: 1.526 GiB/s\n"
            "| IO rate: 0.400 MIOP/s\n"
            "| PE hit rate: 95.000% (950:50)\n"
            "| Latency:\n"
            "| \tMin: 10us\n"
            "| \tMax: 900us\n"
            "| \tMean: 25us\n"
            "| \tp50: 20us\n"
            "| \tp99: 500us\n"
            "| \tp99.9: 800us\n"
            "+================================================+\n");
}

TEST(initiator_stats, a_failed_run_prints_test_failed) {
  EXPECT_EQ(format_run_failed(),
            "+================================================+\n"
            "| Test failed!!\n"
            "+================================================+\n");
}

TEST(initiator_stats, workers_merge_into_the_runs_figures) {
  const auto t0 = worker_stats::clock::time_point{} + 1h;
  std::vector<worker_stats> workers(2);
  workers[0].start_time = t0;
  workers[0].end_time = t0 + 1s;
  workers[0].record_transaction(10us);
  workers[0].record_transaction(30us);
  workers[0].pe_hits = 3;
  workers[0].pe_misses = 1;
  workers[1].start_time = t0;
  workers[1].end_time = t0 + 2s;
  workers[1].record_transaction(5us);
  workers[1].record_transaction(75us);
  workers[1].pe_hits = 5;
  workers[1].pe_misses = 11;

  worker_stats all;
  for (const auto& w : workers) all.merge(w);
  EXPECT_EQ(all.operation_count, 4u);
  EXPECT_EQ(all.latency_min_ns, 5'000u);
  EXPECT_EQ(all.latency_max_ns, 75'000u);
  EXPECT_EQ(all.latency_sum_ns, 120'000u);
  EXPECT_EQ(all.latency.count(), 4u);
  EXPECT_EQ(all.start_time, t0);
  EXPECT_EQ(all.end_time, t0 + 2s);

  auto s = summarize(workers, 8192);
  EXPECT_EQ(s.duration_seconds, 2.0);
  EXPECT_EQ(s.operation_count, 4u);
  EXPECT_EQ(s.pe_hits, 8u);
  EXPECT_EQ(s.pe_misses, 12u);
  EXPECT_EQ(s.latency_min_us, 5u);
  EXPECT_EQ(s.latency_max_us, 75u);
  EXPECT_EQ(s.latency_mean_us, 30u);
  EXPECT_EQ(s.latency_p50_us, 10u);  // 2nd of 4 samples; 10 us lies in a bucket of 128 ns
  EXPECT_EQ(s.latency_p999_us, 75u);
  EXPECT_EQ(format_run_stats(s),
            "+================================================+\n"
            "| Stats\n"
            "+================================================+\n"
            "| Duration (seconds): 2.000000\n"
            "| Operation count: 4\n"
            "| Data rate: 0.000 GiB/s\n"
            "| IO rate: 0.000 MIOP/s\n"
            "| PE hit rate: 40.000% (8:12)\n"
            "| Latency:\n"
            "| \tMin: 5us\n"
            "| \tMax: 75us\n"
            "| \tMean: 30us\n"
            "| \tp50: 10us\n"
            "| \tp99: 75us\n"
            "| \tp99.9: 75us\n"
            "+================================================+\n");
}

TEST(initiator_stats, a_run_with_nothing_done_has_zeros_not_garbage) {
  std::vector<worker_stats> workers(3);
  auto s = summarize(workers, 4096);
  EXPECT_EQ(s, (run_summary{.io_size = 4096}));
}

TEST(initiator_stats, percentiles_of_a_uniform_distribution) {
  worker_stats w;
  for (int us = 1; us <= 10'000; ++us) w.record_transaction(std::chrono::microseconds(us));
  auto s = summarize(std::vector<worker_stats>{w}, 4096);
  // Within the histogram's 1/32 resolution, and never below the true value.
  auto near = [](uint32_t got, uint32_t want) {
    EXPECT_GE(got, want);
    EXPECT_LE(got, want + want / 32);
  };
  near(s.latency_p50_us, 5'000);
  near(s.latency_p99_us, 9'900);
  near(s.latency_p999_us, 9'990);
  EXPECT_EQ(s.latency_min_us, 1u);
  EXPECT_EQ(s.latency_max_us, 10'000u);
  EXPECT_EQ(s.latency_mean_us, 5'000u);  // 50'005'000 us / 10'000, integer division
}

TEST(initiator_stats, a_skewed_distribution_puts_the_tail_in_p99_9) {
  latency_histogram h;
  for (int i = 0; i < 998; ++i) h.record(100);
  h.record(5'000);
  h.record(1'000'000);
  // 64..127 is split in 32 buckets 2 wide: 100 lies in [100, 101], reported as its upper edge.
  EXPECT_EQ(h.value_at_quantile(0.5), 101u);
  EXPECT_EQ(h.value_at_quantile(0.99), 101u);
  EXPECT_GE(h.value_at_quantile(0.999), 5'000u);
  EXPECT_LT(h.value_at_quantile(0.999), 5'000u + 5'000u / 32);
  EXPECT_GE(h.value_at_quantile(1.0), 1'000'000u);
}

TEST(initiator_stats, buckets_are_exact_below_32_and_within_one_32nd_above) {
  for (uint64_t v = 0; v < 32; ++v)
    EXPECT_EQ(latency_histogram::bucket_upper_edge(latency_histogram::bucket_of(v)), v);
  for (uint64_t v = 32; v < (uint64_t(1) << 40); v = v * 3 / 2 + 1) {
    const uint64_t edge = latency_histogram::bucket_upper_edge(latency_histogram::bucket_of(v));
    ASSERT_GE(edge, v);
    ASSERT_LE(edge - v, v / 32) << v;
  }
  // Beyond the range: the last bucket, not an index out of bounds.
  EXPECT_EQ(latency_histogram::bucket_of(UINT64_MAX), latency_histogram::bucket_count - 1);
  static_assert(sizeof(latency_histogram) <= 10 * 1024, "bounded memory per worker");
}

TEST(initiator_stats, json_has_the_same_numbers_and_round_trips) {
  const auto s = known_summary();
  const auto json = to_json(s);
  EXPECT_EQ(json.at("operation_count"), 1'000'000u);
  EXPECT_DOUBLE_EQ(json.at("data_rate_gib_per_second").get<double>(), 1.52587890625);
  EXPECT_DOUBLE_EQ(json.at("io_rate_miops").get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(json.at("pe_hit_rate_percent").get<double>(), 95.0);
  EXPECT_EQ(json.at("latency_us").at("p99.9"), 800u);
  EXPECT_EQ(run_summary_from_json(nlohmann::json::parse(json.dump())), s);
  auto broken = json;
  broken.erase("io_size");
  EXPECT_THROW(run_summary_from_json(broken), nlohmann::json::exception);
}

TEST(initiator_stats, progress_is_one_line_of_rates_between_two_samples) {
  EXPECT_EQ(format_progress({1.0, 100'000}, {2.0, 350'000}, 4096),
            "[    2.0s] IOPS 250000 MB/s 1024.0 ops 350000");
  EXPECT_EQ(format_progress({2.0, 5}, {2.0, 5}, 4096), "[    2.0s] IOPS 0 MB/s 0.0 ops 5");
}

}  // namespace
}  // namespace zc::initiator
