// The zero-copy pipeline end to end with the real programs on 127.0.0.1 (pipeline.hpp): every
// execution strategy with one and two workers, several blocks per IO, validity against content
// loaded in the target, a wrong expected file, Ctrl-C, each process killed mid-run, start-up in
// any order, and bad flags.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "integration/pipeline.hpp"

namespace zc::test {
namespace {

using namespace std::chrono_literals;

struct strategy_case {
  const char* strategy;
  uint32_t workers;
  uint32_t blocks_per_io;
};

class every_strategy : public ::testing::TestWithParam<strategy_case> {};

TEST_P(every_strategy, runs_to_its_limit_through_the_service) {
  const auto c = GetParam();
  const std::string strategy = c.strategy;
  pipeline_options o{.workers = c.workers};
  std::string content;
  if (strategy == "read_only_data_validity_test") {
    content = temp_file("content", content_bytes(uint64_t(block_size) * block_count, 7));
    o.content = content;
  }
  pipeline p(o);
  std::vector<std::string> extra{"--blocks-per-io", std::to_string(c.blocks_per_io),
                                 "--transaction-count", "8"};
  if (!content.empty()) {
    extra.push_back("--storage-plain-content");
    extra.push_back(content);
  }
  ASSERT_TRUE(p.start_all(strategy, 300, extra)) << p.all_output();
  expect_success(p, 300ull * c.workers);
  if (!content.empty()) std::filesystem::remove(content);
}

INSTANTIATE_TEST_SUITE_P(pipeline, every_strategy,
                         ::testing::Values(strategy_case{"read_throughput_test", 1, 1},
                                           strategy_case{"read_throughput_test", 2, 4},
                                           strategy_case{"write_throughput_test", 1, 4},
                                           strategy_case{"write_throughput_test", 2, 1},
                                           strategy_case{"read_write_data_validity_test", 1, 1},
                                           strategy_case{"read_write_data_validity_test", 2, 4},
                                           strategy_case{"read_only_data_validity_test", 1, 4},
                                           strategy_case{"read_only_data_validity_test", 2, 1}),
                         [](const auto& info) {
                           return std::string(info.param.strategy) + "_" +
                                  std::to_string(info.param.workers) + "_workers_" +
                                  std::to_string(info.param.blocks_per_io) + "_blocks_per_io";
                         });

TEST(pipeline, thousands_of_ios_in_flight_get_through_the_service) {
  // Past 1024 unsent messages UCX pushes back (`again`): the service must queue, not fail.
  pipeline p({.block_count = 4096});
  ASSERT_TRUE(p.start_all("read_write_data_validity_test", 6000, {"--transaction-count", "3000"}))
      << p.all_output();
  expect_success(p, 6000);
}

TEST(pipeline, a_wrong_expected_file_fails_the_test_with_the_offset_and_bytes) {
  const auto content = temp_file("content", content_bytes(uint64_t(block_size) * block_count, 1));
  auto wrong_bytes = content_bytes(uint64_t(block_size) * block_count, 1);
  wrong_bytes[5 * block_size + 17] ^= 0x5A;
  const auto wrong = temp_file("wrong", wrong_bytes);
  pipeline p({.content = content});
  ASSERT_TRUE(p.start_all("read_only_data_validity_test", 2000,
                          {"--storage-plain-content", wrong, "--transaction-count", "4"}))
      << p.all_output();
  EXPECT_EQ(p.initiator->wait(run_timeout), std::optional<int>(1)) << p.all_output();
  const std::string out = p.initiator->output();
  EXPECT_NE(out.find("Test failed!!"), std::string::npos) << out;
  EXPECT_NE(out.find("does not match expected value at storage offset 0x5000"), std::string::npos)
      << out;
  EXPECT_NE(out.find("first difference at byte 17"), std::string::npos) << out;
  // The session still ends in order.
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(0)) << p.all_output();
  EXPECT_EQ(p.target->wait(start_timeout), std::optional<int>(0)) << p.all_output();
  std::filesystem::remove(content);
  std::filesystem::remove(wrong);
}

TEST(pipeline, ctrl_c_drains_the_run_and_ends_the_session_in_order) {
  pipeline p;
  ASSERT_TRUE(p.start_all("read_throughput_test", 1'000'000'000)) << p.all_output();
  ASSERT_TRUE(p.initiator->wait_for_output("running read_throughput_test", start_timeout))
      << p.all_output();
  std::this_thread::sleep_for(300ms);
  p.initiator->signal(SIGINT);
  EXPECT_EQ(p.initiator->wait(run_timeout), std::optional<int>(130)) << p.all_output();
  EXPECT_NE(p.initiator->output().find("| Operation count: "), std::string::npos);
  EXPECT_EQ(p.service->wait(start_timeout), std::optional<int>(0)) << p.all_output();
  EXPECT_EQ(p.target->wait(start_timeout), std::optional<int>(0)) << p.all_output();
}

TEST(pipeline, progress_lines_and_the_stats_json_file_report_the_run) {
  const auto json = std::filesystem::temp_directory_path() / unique_name("stats") += ".json";
  pipeline p;
  ASSERT_TRUE(p.start_all("read_throughput_test", 1'000'000'000,
                          {"--progress", "--stats-json", json.string()}))
      << p.all_output();
  // One progress line a second on stderr while the run goes on.
  ASSERT_TRUE(p.initiator->wait_for_output("IOPS", start_timeout)) << p.all_output();
  p.initiator->signal(SIGINT);
  EXPECT_EQ(p.initiator->wait(run_timeout), std::optional<int>(130)) << p.all_output();
  std::ifstream in(json);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string out = p.initiator->output();
  const std::string key = "| Operation count: ";
  const auto at = out.find(key);
  ASSERT_NE(at, std::string::npos) << out;
  const std::string count = out.substr(at + key.size(), out.find('\n', at) - at - key.size());
  const auto stats = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(stats.is_discarded()) << text;
  EXPECT_EQ(std::to_string(stats.value("operation_count", uint64_t(0))), count) << text;
  EXPECT_TRUE(stats.contains("latency_us") && stats["latency_us"].contains("p99")) << text;
  std::filesystem::remove(json);
}

// A run long enough to be killed in the middle of.
void start_long_run(pipeline& p) {
  ASSERT_TRUE(p.start_all("read_write_data_validity_test", 1'000'000'000)) << p.all_output();
  ASSERT_TRUE(p.initiator->wait_for_output("running read_write_data_validity_test", start_timeout))
      << p.all_output();
  std::this_thread::sleep_for(300ms);
}

TEST(pipeline, a_target_killed_mid_run_fails_the_initiator_and_the_service) {
  pipeline p;
  start_long_run(p);
  p.target->signal(SIGKILL);
  const auto bound = std::chrono::seconds(control_timeout_s) + exit_margin;
  auto initiator = p.initiator->wait(bound);
  ASSERT_TRUE(initiator.has_value()) << p.all_output();
  EXPECT_NE(*initiator, 0) << p.all_output();
  EXPECT_NE(p.initiator->output().find("Test failed!!"), std::string::npos) << p.all_output();
  auto service = p.service->wait(bound);
  ASSERT_TRUE(service.has_value()) << p.all_output();
  EXPECT_NE(*service, 0) << p.all_output();
}

TEST(pipeline, a_service_killed_mid_run_fails_the_initiator_and_ends_the_target_session) {
  pipeline p;
  start_long_run(p);
  p.service->signal(SIGKILL);
  const auto bound = std::chrono::seconds(control_timeout_s) + exit_margin;
  auto initiator = p.initiator->wait(bound);
  ASSERT_TRUE(initiator.has_value()) << p.all_output();
  EXPECT_NE(*initiator, 0) << p.all_output();
  // The target ends that session and waits for the next service (as it always has).
  EXPECT_TRUE(p.target->wait_for_output("ending the session", bound)) << p.all_output();
  EXPECT_TRUE(p.target->running());
}

// A service that stops answering (SIGSTOP: its channel stays up): the initiator's IOs pass their
// deadline (twice the control timeout) and it gives up on the service; it does not reuse the
// memory of the IOs the service has, so it ends the run (exit 1) instead of waiting on them.
TEST(pipeline, a_silent_service_fails_the_initiator_in_bounded_time) {
  pipeline p;
  start_long_run(p);
  p.service->signal(SIGSTOP);
  ASSERT_TRUE(p.service->wait_stopped(start_timeout));
  const auto bound = std::chrono::seconds(4 * control_timeout_s) + exit_margin;
  auto initiator = p.initiator->wait(bound);
  p.service->signal(SIGCONT);
  ASSERT_TRUE(initiator.has_value()) << p.all_output();
  EXPECT_NE(*initiator, 0) << p.all_output();
  EXPECT_NE(p.initiator->output().find("gave up on the service"), std::string::npos)
      << p.all_output();
}

TEST(pipeline, an_initiator_killed_mid_run_ends_the_service_and_the_target) {
  pipeline p;
  start_long_run(p);
  p.initiator->signal(SIGKILL);
  const auto bound = std::chrono::seconds(control_timeout_s) + exit_margin;
  auto service = p.service->wait(bound);
  ASSERT_TRUE(service.has_value()) << p.all_output();
  EXPECT_NE(*service, 0) << p.all_output();
  EXPECT_TRUE(p.target->wait(bound).has_value()) << p.all_output();
}

TEST(pipeline, a_service_started_before_its_target_waits_for_it) {
  pipeline p;
  ASSERT_TRUE(p.start_service(false));
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(p.start_target()) << p.all_output();
  ASSERT_TRUE(p.service->wait_for_output("listening on channel", start_timeout)) << p.all_output();
  p.start_initiator("read_write_data_validity_test", 100);
  expect_success(p, 100);
}

TEST(pipeline, an_initiator_started_before_its_service_waits_for_it) {
  pipeline p;
  ASSERT_TRUE(p.start_target()) << p.all_output();
  p.start_initiator("read_write_data_validity_test", 100);
  std::this_thread::sleep_for(500ms);
  ASSERT_TRUE(p.start_service()) << p.all_output();
  expect_success(p, 100);
}

TEST(pipeline, an_initiator_without_a_service_gives_up_within_the_control_timeout) {
  pipeline p;
  p.start_initiator("read_throughput_test", 10);
  auto code = p.initiator->wait(std::chrono::seconds(control_timeout_s) + exit_margin);
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1);
  EXPECT_NE(p.initiator->output().find("Timed out trying to connect to storage"), std::string::npos)
      << p.initiator->output();
}

// Ctrl-C while the initiator still dials its service ends it at once (130), not at the end of a
// long control timeout.
TEST(pipeline, ctrl_c_while_waiting_for_the_service_ends_the_initiator_at_once) {
  subprocess initiator({binary("zcstore_initiator_comch"), "-d", "auto", "--poll-mode", "event",
                        "--cpu", "0", "--execution-strategy", "read_throughput_test",
                        "--run-limit-operation-count", "10", "--command-channel-name",
                        unique_name("nobody"), "--control-timeout", "60"});
  std::this_thread::sleep_for(300ms);
  initiator.signal(SIGINT);
  EXPECT_EQ(initiator.wait(exit_margin + 5s), std::optional<int>(130)) << initiator.output();
}

TEST(pipeline, bad_flags_are_one_clear_line_and_exit_2) {
  struct bad {
    std::vector<std::string> argv;
    std::string says;
  };
  const std::vector<bad> cases{
      {{binary("zcstore_initiator_comch"), "--cpu", "0", "--execution-strategy", "fastest"},
       "fastest is unknown"},
      {{binary("zcstore_initiator_comch"), "--cpu", "0", "--execution-strategy",
        "read_throughput_test", "--blocks-per-io", "0"},
       "blocks-per-io"},
      {{binary("zcstore_initiator_comch"), "--execution-strategy", "read_throughput_test"},
       "--cpu"},
      {{binary("zcstore_comch_to_rdma_zero_copy"), "-r", "x", "--cpu", "0", "--storage-server",
        "300.1.1.1:5"},
       "300.1.1.1:5"},
      {{binary("zcstore_comch_to_rdma_zero_copy"), "-r", "x", "--cpu", "0", "--storage-server",
        "127.0.0.1:5", "--control-timeout", "0"},
       "control-timeout must not be zero"},
      {{binary("zcstore_comch_to_rdma_zero_copy"), "-r", "x", "--storage-server", "127.0.0.1:5"},
       "--cpu"},
  };
  for (const auto& c : cases) {
    subprocess p(c.argv);
    EXPECT_EQ(p.wait(start_timeout), std::optional<int>(2)) << c.argv[0] << "\n" << p.output();
    EXPECT_NE(p.output().find(c.says), std::string::npos) << p.output();
  }
}

}  // namespace
}  // namespace zc::test
