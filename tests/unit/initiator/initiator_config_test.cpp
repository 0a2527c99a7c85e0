#include "initiator_config.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/cli.hpp"

namespace zc::initiator {
namespace {

struct parse_result {
  std::optional<int> code;
  initiator_config config;
  std::string err;
};

parse_result parse(std::vector<std::string> words) {
  words.insert(words.begin(), program_name);
  std::vector<const char*> argv;
  for (const auto& w : words) argv.push_back(w.c_str());
  parse_result r;
  testing::internal::CaptureStderr();
  r.code = parse_config(static_cast<int>(argv.size()), argv.data(), r.config);
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

initiator_config valid_config() {
  initiator_config c;
  c.cpus = {0};
  c.execution_strategy_name = "read_throughput_test";
  return c;
}

TEST(initiator_config, defaults_are_the_references) {
  auto r = parse({"--cpu", "0", "--execution-strategy", "read_throughput_test"});
  ASSERT_FALSE(r.code) << r.err;
  const auto& c = r.config;
  EXPECT_EQ(c.device, "auto");
  EXPECT_EQ(c.cpus, std::vector<uint32_t>{0});
  EXPECT_EQ(c.storage_plain_content, "");
  EXPECT_EQ(c.strategy(), execution_strategy::read_throughput_test);
  EXPECT_EQ(c.run_limit_operation_count, 1'000'000u);
  EXPECT_EQ(c.transaction_count, 64u);
  EXPECT_EQ(c.command_channel_name, "doca_storage_comch");
  EXPECT_EQ(c.control_timeout(), std::chrono::seconds(5));
  EXPECT_EQ(c.local_io_region_size, 0u);
  EXPECT_EQ(c.blocks_per_io, 1u);
  EXPECT_EQ(c.poll_mode, core::poll_mode::adaptive);
  EXPECT_EQ(c.stats_json, "");
  EXPECT_EQ(c.progress, ::isatty(STDERR_FILENO) == 1);
}

TEST(initiator_config, every_flag_is_read) {
  auto r = parse({"-d",
                  "tcp",
                  "--cpu",
                  "0",
                  "--cpu",
                  "1",
                  "--storage-plain-content",
                  "/tmp/x",
                  "--execution-strategy",
                  "read_write_data_validity_test",
                  "--run-limit-operation-count",
                  "77",
                  "--transaction-count",
                  "9",
                  "--command-channel-name",
                  "chan",
                  "--control-timeout",
                  "11",
                  "--local-io-region-size",
                  "8589934592",
                  "--blocks-per-io",
                  "65535",
                  "--poll-mode",
                  "event",
                  "--stats-json",
                  "/tmp/s.json",
                  "--progress"});
  ASSERT_FALSE(r.code) << r.err;
  const auto& c = r.config;
  EXPECT_EQ(c.device, "tcp");
  EXPECT_EQ(c.cpus, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(c.storage_plain_content, "/tmp/x");
  EXPECT_EQ(c.strategy(), execution_strategy::read_write_data_validity_test);
  EXPECT_EQ(c.run_limit_operation_count, 77u);
  EXPECT_EQ(c.transaction_count, 9u);
  EXPECT_EQ(c.command_channel_name, "chan");
  EXPECT_EQ(c.control_timeout_seconds, 11u);
  // 8 GiB: the reference parsed this as a C int.
  EXPECT_EQ(c.local_io_region_size, uint64_t(8) << 30);
  EXPECT_EQ(c.blocks_per_io, 65535u);
  EXPECT_EQ(c.poll_mode, core::poll_mode::event);
  EXPECT_EQ(c.stats_json, "/tmp/s.json");
  EXPECT_TRUE(c.progress);
}

TEST(initiator_config, no_progress_turns_progress_off) {
  auto on = parse({"--cpu", "0", "--execution-strategy", "read_throughput_test", "--progress"});
  auto off = parse({"--cpu", "0", "--execution-strategy", "read_throughput_test", "--no-progress"});
  ASSERT_FALSE(on.code);
  ASSERT_FALSE(off.code);
  EXPECT_TRUE(on.config.progress);
  EXPECT_FALSE(off.config.progress);
}

TEST(initiator_config, json_file_is_read_and_the_command_line_wins) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("zc_initiator_config_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(path);
    out << R"({"cpu": [0, 1], "execution-strategy": "write_throughput_test",
              "transaction-count": 8, "blocks-per-io": 4, "no-progress": true})";
  }
  auto r = parse({"--json", path.string(), "--transaction-count", "16", "--cpu", "0"});
  std::filesystem::remove(path);
  ASSERT_FALSE(r.code) << r.err;
  EXPECT_EQ(r.config.strategy(), execution_strategy::write_throughput_test);
  EXPECT_EQ(r.config.transaction_count, 16u);
  EXPECT_EQ(r.config.blocks_per_io, 4u);
  EXPECT_EQ(r.config.cpus, std::vector<uint32_t>{0});
  EXPECT_FALSE(r.config.progress);
}

TEST(initiator_config, a_bad_command_line_is_one_line_and_exit_2) {
  for (auto words : std::vector<std::vector<std::string>>{
           {"--cpu", "0", "--execution-strategy", "read_throughput_test", "--bogus"},
           {"--cpu", "0", "--execution-strategy", "read_throughput_test", "--transaction-count",
            "many"},
           {"--cpu", "0", "--execution-strategy", "read_throughput_test", "--blocks-per-io", "-1"},
           {"--cpu", "0"},                                    // no strategy
           {"--execution-strategy", "read_throughput_test"},  // no cpu
           {"--cpu", "0", "--execution-strategy", "read_throughput_test", "--json",
            "/nonexistent/zc.json"},
       }) {
    auto r = parse(words);
    ASSERT_TRUE(r.code) << words.back();
    EXPECT_EQ(*r.code, core::exit_bad_usage) << words.back();
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind(program_name, 0), 0u) << r.err;
  }
}

TEST(initiator_config, each_validation_error_has_the_references_text) {
  auto errors_of = [](auto change) {
    auto c = valid_config();
    change(c);
    return validate(c);
  };
  EXPECT_TRUE(errors_of([](initiator_config&) {}).empty());
  EXPECT_EQ(errors_of([](auto& c) { c.transaction_count = 0; }),
            std::vector<std::string>{"transaction-count must not be zero"});
  EXPECT_EQ(errors_of([](auto& c) { c.control_timeout_seconds = 0; }),
            std::vector<std::string>{"control-timeout must not be zero"});
  EXPECT_EQ(errors_of([](auto& c) { c.execution_strategy_name = "read_only_data_validity_test"; }),
            std::vector<std::string>{
                "read_only_data_validity_test requires plain data file to be provided"});
  EXPECT_EQ(errors_of([](auto& c) { c.run_limit_operation_count = 0; }),
            std::vector<std::string>{
                "read_throughput_test requires run-limit-operation-count to be greater than 0"});
  EXPECT_EQ(errors_of([](auto& c) { c.execution_strategy_name = "fast_test"; }),
            std::vector<std::string>{"fast_test is unknown"});
}

TEST(initiator_config, the_references_defects_are_refused) {
  auto c = valid_config();
  c.blocks_per_io = 0;  // divided by zero in the reference
  EXPECT_EQ(validate(c), std::vector<std::string>{"blocks-per-io must be between 1 and 65535"});
  c.blocks_per_io = 65536;  // truncated to 16 bits in the reference
  EXPECT_EQ(validate(c), std::vector<std::string>{"blocks-per-io must be between 1 and 65535"});
  c.blocks_per_io = 65535;
  EXPECT_TRUE(validate(c).empty());
  // A validity test with no transactions checked nothing and passed in the reference.
  for (auto mode : {"read_write_data_validity_test", "read_only_data_validity_test"}) {
    auto v = valid_config();
    v.execution_strategy_name = mode;
    v.storage_plain_content = "/tmp/plain";
    v.run_limit_operation_count = 0;
    EXPECT_EQ(validate(v),
              std::vector<std::string>{std::string(mode) +
                                       " requires run-limit-operation-count to be greater than 0"});
  }
}

TEST(initiator_config, all_errors_are_printed_each_on_its_line_then_exit_2) {
  auto r = parse({"--cpu", "0", "--execution-strategy", "read_only_data_validity_test",
                  "--transaction-count", "0", "--control-timeout", "0", "--blocks-per-io", "0"});
  ASSERT_TRUE(r.code);
  EXPECT_EQ(*r.code, core::exit_bad_usage);
  const std::string p = std::string(program_name) + ": ";
  EXPECT_EQ(r.err, p + "transaction-count must not be zero\n" + p +
                       "control-timeout must not be zero\n" + p +
                       "blocks-per-io must be between 1 and 65535\n" + p +
                       "read_only_data_validity_test requires plain data file to be provided\n" +
                       p + "Invalid initiator_comch_app_configuration detected\n");
}

TEST(initiator_config, print_config_shows_the_references_fields_and_the_two_it_left_out) {
  auto c = valid_config();
  c.cpus = {0, 1};
  c.storage_plain_content = "plain.bin";
  c.blocks_per_io = 4;
  c.local_io_region_size = uint64_t(5) << 32;
  EXPECT_EQ(format_config(c),
            "configuration: {\n"
            "\tcpus: [0, 1]\n"
            "\texecution_strategy: \"read_throughput_test\"\n"
            "\tdevice: \"auto\"\n"
            "\tcommand_channel_name: \"doca_storage_comch\"\n"
            "\tstorage_plain_content: \"plain.bin\"\n"
            "\ttransaction_count: 64\n"
            "\trun_limit_operation_count: 1000000\n"
            "\tcontrol_timeout: 5\n"
            "\tblocks_per_io: 4\n"
            "\tlocal_io_region_size: 21474836480\n"
            "}\n");
}

TEST(initiator_config, strategy_names_round_trip) {
  for (auto s :
       {execution_strategy::read_throughput_test, execution_strategy::write_throughput_test,
        execution_strategy::read_only_data_validity_test,
        execution_strategy::read_write_data_validity_test})
    EXPECT_EQ(strategy_from_string(to_string(s)), s);
  EXPECT_FALSE(strategy_from_string("READ_THROUGHPUT_TEST"));
}

}  // namespace
}  // namespace zc::initiator
