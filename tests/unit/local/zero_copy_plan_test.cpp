// zcstore_local zero-copy's options and the command lines it builds for the target, the service
// and the initiator: pure functions, no process started.
#include "zero_copy_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace zc::local {
namespace {

using words = std::vector<std::string>;

const std::vector<uint32_t> two_cores{0, 1};

// The values that follow each occurrence of `flag` in `argv`.
words values_of(const words& argv, const std::string& flag) {
  words out;
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) out.push_back(argv[i + 1]);
  return out;
}

bool contains(const words& argv, const std::string& word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

zero_copy_options parsed(const words& args) {
  auto result = parse_zero_copy_options(args);
  EXPECT_FALSE(result.exit_code) << "exit code " << result.exit_code.value_or(-1);
  return result.options;
}

std::optional<int> exit_code_of(const words& args) {
  return parse_zero_copy_options(args).exit_code;
}

TEST(zero_copy_options, defaults) {
  auto o = parsed({});
  EXPECT_EQ(o.target_size, 64ull << 20);
  EXPECT_FALSE(o.target_size_given);
  EXPECT_EQ(o.block_size, 4096u);
  EXPECT_EQ(o.workers, 1u);
  EXPECT_EQ(o.poll_mode, "adaptive");
  EXPECT_EQ(o.control_timeout_seconds, 5u);
  EXPECT_EQ(o.device, "auto");
  EXPECT_TRUE(o.content.empty());
  EXPECT_TRUE(o.bin_dir.empty());
  EXPECT_TRUE(o.initiator_words.empty());
}

TEST(zero_copy_options, sizes_take_binary_suffixes) {
  auto o = parsed({"--target-size", "1MiB", "--block-size", "512"});
  EXPECT_EQ(o.target_size, 1u << 20);
  EXPECT_TRUE(o.target_size_given);
  EXPECT_EQ(target_block_count(o, std::nullopt), 2048u);
}

TEST(zero_copy_options, words_after_double_dash_are_the_initiators) {
  auto o = parsed({"--workers", "2", "--", "--transaction-count", "8", "--workers", "9"});
  EXPECT_EQ(o.workers, 2u);
  EXPECT_EQ(o.initiator_words, (words{"--transaction-count", "8", "--workers", "9"}));
}

TEST(zero_copy_options, json_file_under_the_command_line) {
  const std::string path = testing::TempDir() + "zc_local_options.json";
  std::ofstream(path) << R"({"target-size": "2MiB", "workers": 2, "poll-mode": "event"})";
  auto o = parsed({"-j", path, "--workers", "3", "--", "--transaction-count", "4"});
  std::remove(path.c_str());
  EXPECT_EQ(o.target_size, 2u << 20);
  EXPECT_EQ(o.workers, 3u);  // the command line wins
  EXPECT_EQ(o.poll_mode, "event");
  EXPECT_EQ(o.initiator_words, (words{"--transaction-count", "4"}));
}

TEST(zero_copy_options, help_exits_zero) {
  testing::internal::CaptureStdout();
  EXPECT_EQ(exit_code_of({"--help"}), 0);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("--target-size"), std::string::npos);
}

TEST(zero_copy_options, bad_command_lines_exit_two_with_one_line) {
  for (const words& args : std::vector<words>{
           {"--no-such-flag"},
           {"--workers", "0"},
           {"--workers", "two"},
           {"--block-size", "0"},
           {"--target-size", "1000"},  // not a multiple of 4096
           {"--target-size", "0"},
           {"--control-timeout", "0"},
           {"--poll-mode", "sometimes"},
           {"--device", "no-such-device-zz9"},
           {"--", "--command-channel-name", "mine"},  // the launcher's to choose
           {"--", "--command-channel-name=mine"},
       }) {
    testing::internal::CaptureStderr();
    EXPECT_EQ(exit_code_of(args), 2) << args.front();
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_FALSE(err.empty()) << args.front();
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
}

TEST(zero_copy_options, log_levels_go_to_all_three_unless_the_initiator_has_its_own) {
  auto quiet = parsed({});
  EXPECT_FALSE(contains(target_argv(quiet, "t", std::nullopt, two_cores), "--log-level"));
  EXPECT_FALSE(contains(initiator_argv(quiet, "i", "c", two_cores), "--sdk-log-level"));

  auto o = parsed({"-l", "60", "--sdk-log-level", "30", "--", "--log-level", "20"});
  auto target = target_argv(o, "t", std::nullopt, two_cores);
  EXPECT_EQ(values_of(target, "--log-level"), words{"60"});
  EXPECT_EQ(values_of(target, "--sdk-log-level"), words{"30"});
  EXPECT_EQ(values_of(service_argv(o, "s", "c", 1, two_cores), "--log-level"), words{"60"});
  auto initiator = initiator_argv(o, "i", "c", two_cores);
  EXPECT_EQ(values_of(initiator, "--log-level"), words{"20"});
  EXPECT_EQ(values_of(initiator, "--sdk-log-level"), words{"30"});
}

TEST(zero_copy_options, round_robin_cpus_wrap_at_the_usable_cores) {
  EXPECT_EQ(round_robin_cpus(1, {0, 1}), (std::vector<uint32_t>{0}));
  EXPECT_EQ(round_robin_cpus(5, {0, 1}), (std::vector<uint32_t>{0, 1, 0, 1, 0}));
  EXPECT_EQ(round_robin_cpus(3, {2, 5, 6, 7}), (std::vector<uint32_t>{2, 5, 6}));  // a cpuset
  EXPECT_EQ(round_robin_cpus(3, {2, 5}), (std::vector<uint32_t>{2, 5, 2}));
  EXPECT_EQ(round_robin_cpus(2, {}), (std::vector<uint32_t>{0, 0}));  // unknown: core 0
}

TEST(zero_copy_options, has_flag_sees_every_spelling) {
  EXPECT_TRUE(has_flag({"--cpu", "1"}, "--cpu"));
  EXPECT_TRUE(has_flag({"--cpu=1"}, "--cpu"));
  EXPECT_FALSE(has_flag({"--cpus", "1"}, "--cpu"));
  EXPECT_TRUE(has_flag({"-d", "tcp"}, "--device", "-d"));
  EXPECT_TRUE(has_flag({"-dtcp"}, "--device", "-d"));
  EXPECT_FALSE(has_flag({"--device-x"}, "--device", "-d"));
}

TEST(target_command_line, defaults) {
  auto argv = target_argv(parsed({}), "/bin/t", std::nullopt, two_cores);
  EXPECT_EQ(argv.front(), "/bin/t");
  EXPECT_EQ(values_of(argv, "-d"), words{"auto"});
  EXPECT_EQ(values_of(argv, "--cpu"), words{"0"});
  EXPECT_EQ(values_of(argv, "--listen-port"), words{"0"});
  EXPECT_EQ(values_of(argv, "--listen-address"), words{"127.0.0.1"});
  EXPECT_EQ(values_of(argv, "--block-size"), words{"4096"});
  EXPECT_EQ(values_of(argv, "--block-count"), words{"16384"});  // 64 MiB
  EXPECT_EQ(values_of(argv, "--poll-mode"), words{"adaptive"});
  EXPECT_FALSE(contains(argv, "--binary-content"));
}

TEST(target_command_line, workers_and_poll_mode) {
  auto argv = target_argv(parsed({"--workers", "3", "--poll-mode", "event", "-d", "tcp"}), "t",
                          std::nullopt, two_cores);
  EXPECT_EQ(values_of(argv, "--cpu"), (words{"0", "1", "0"}));
  EXPECT_EQ(values_of(argv, "--poll-mode"), words{"event"});
  EXPECT_EQ(values_of(argv, "-d"), words{"tcp"});
}

TEST(target_command_line, content_is_the_binary_content_and_decides_the_size) {
  auto o = parsed({"--content", "/data/blocks.bin"});
  auto argv = target_argv(o, "t", uint64_t{1} << 20, two_cores);
  EXPECT_EQ(values_of(argv, "--binary-content"), words{"/data/blocks.bin"});
  EXPECT_EQ(values_of(argv, "--block-count"), words{"256"});
  // A file that cannot be read: the default size, and the target says what is wrong.
  EXPECT_EQ(values_of(target_argv(o, "t", std::nullopt, two_cores), "--block-count"),
            words{"16384"});
}

TEST(target_command_line, target_size_wins_over_the_content_size) {
  auto o = parsed({"--content", "c.bin", "--target-size", "8KiB"});
  EXPECT_EQ(values_of(target_argv(o, "t", uint64_t{1} << 20, two_cores), "--block-count"),
            words{"2"});
}

TEST(service_command_line, points_at_the_target_and_the_channel) {
  auto argv = service_argv(parsed({"--control-timeout", "7", "--poll-mode", "event"}), "/bin/s",
                           "chan-1", 4242, two_cores);
  EXPECT_EQ(argv.front(), "/bin/s");
  EXPECT_EQ(values_of(argv, "-d"), words{"auto"});
  EXPECT_EQ(values_of(argv, "-r"), words{"auto"});
  EXPECT_EQ(values_of(argv, "--cpu"), words{"0"});
  EXPECT_EQ(values_of(argv, "--storage-server"), words{"127.0.0.1:4242"});
  EXPECT_EQ(values_of(argv, "--command-channel-name"), words{"chan-1"});
  EXPECT_EQ(values_of(argv, "--control-timeout"), words{"7"});
  EXPECT_EQ(values_of(argv, "--poll-mode"), words{"event"});
}

// Behind zcstore_nbd the servers outlive it (zcstore_local starts another in its place); behind
// an initiator they end with its session, as the reference's do.
TEST(service_command_line, servers_keep_serving_behind_nbd_only) {
  const auto served = parsed({"--nbd", "/tmp/s.sock"});
  EXPECT_TRUE(contains(target_argv(served, "t", std::nullopt, two_cores), "--keep-serving"));
  EXPECT_TRUE(contains(service_argv(served, "s", "c", 1, two_cores), "--keep-serving"));
  EXPECT_FALSE(contains(target_argv(parsed({}), "t", std::nullopt, two_cores), "--keep-serving"));
  EXPECT_FALSE(contains(service_argv(parsed({}), "s", "c", 1, two_cores), "--keep-serving"));
}

TEST(service_command_line, has_a_core_per_initiator_worker) {
  EXPECT_EQ(values_of(service_argv(parsed({"--workers", "2"}), "s", "c", 1, two_cores), "--cpu"),
            (words{"0", "1"}));
  // The initiator's own --cpu list decides how many workers it asks the service for.
  auto o = parsed({"--", "--cpu", "1", "--cpu", "1", "--cpu=0"});
  EXPECT_EQ(initiator_worker_count(o), 3u);
  EXPECT_EQ(values_of(service_argv(o, "s", "c", 1, two_cores), "--cpu"), (words{"0", "1", "0"}));
}

TEST(initiator_command_line, defaults) {
  auto argv = initiator_argv(parsed({}), "/bin/i", "chan-1", two_cores);
  EXPECT_EQ(argv.front(), "/bin/i");
  EXPECT_EQ(values_of(argv, "--command-channel-name"), words{"chan-1"});
  EXPECT_EQ(values_of(argv, "--device"), words{"auto"});
  EXPECT_EQ(values_of(argv, "--cpu"), words{"0"});
  EXPECT_EQ(values_of(argv, "--execution-strategy"), words{"read_throughput_test"});
  EXPECT_EQ(values_of(argv, "--run-limit-operation-count"), words{"100000"});
  EXPECT_EQ(values_of(argv, "--control-timeout"), words{"5"});
  EXPECT_EQ(values_of(argv, "--poll-mode"), words{"adaptive"});
  EXPECT_FALSE(contains(argv, "--storage-plain-content"));
}

TEST(initiator_command_line, words_after_double_dash_replace_the_defaults) {
  auto o = parsed({"--workers",
                   "2",
                   "--content",
                   "c.bin",
                   "--poll-mode",
                   "event",
                   "--",
                   "--cpu",
                   "1",
                   "--execution-strategy",
                   "read_write_data_validity_test",
                   "--run-limit-operation-count=50",
                   "--storage-plain-content",
                   "other.bin",
                   "-d",
                   "tcp",
                   "--poll-mode",
                   "busy",
                   "--transaction-count",
                   "4"});
  auto argv = initiator_argv(o, "i", "chan", two_cores);
  EXPECT_EQ(values_of(argv, "--cpu"), words{"1"});
  EXPECT_EQ(values_of(argv, "--execution-strategy"), words{"read_write_data_validity_test"});
  EXPECT_FALSE(contains(argv, "--run-limit-operation-count"));
  EXPECT_TRUE(contains(argv, "--run-limit-operation-count=50"));
  EXPECT_EQ(values_of(argv, "--storage-plain-content"), words{"other.bin"});
  EXPECT_FALSE(contains(argv, "--device"));
  EXPECT_EQ(values_of(argv, "-d"), words{"tcp"});
  EXPECT_EQ(values_of(argv, "--poll-mode"), words{"busy"});
  EXPECT_EQ(values_of(argv, "--transaction-count"), words{"4"});
  // The user's words come last, as given.
  EXPECT_EQ(words(argv.end() - 2, argv.end()), (words{"--transaction-count", "4"}));
}

TEST(initiator_command_line, progress_when_the_launcher_has_a_terminal) {
  auto o = parsed({});
  EXPECT_FALSE(contains(initiator_argv(o, "i", "chan", two_cores), "--progress"));
  o.terminal = true;
  EXPECT_TRUE(contains(initiator_argv(o, "i", "chan", two_cores), "--progress"));
  o.initiator_words = {"--no-progress"};
  auto argv = initiator_argv(o, "i", "chan", two_cores);
  EXPECT_FALSE(contains(argv, "--progress"));
  EXPECT_TRUE(contains(argv, "--no-progress"));
}

TEST(initiator_command_line, content_is_the_expected_plain_content) {
  auto argv =
      initiator_argv(parsed({"--content", "c.bin", "--workers", "3"}), "i", "chan", two_cores);
  EXPECT_EQ(values_of(argv, "--storage-plain-content"), words{"c.bin"});
  EXPECT_EQ(values_of(argv, "--cpu"), (words{"0", "1", "0"}));
}

TEST(zero_copy_plan, nbd_replaces_the_initiator_and_gets_the_words_after_the_separator) {
  const auto o = parsed({"--nbd", "/tmp/s.sock", "--workers", "2", "--poll-mode", "event", "--",
                         "--export-name", "disk"});
  EXPECT_EQ(o.nbd_socket, "/tmp/s.sock");
  const auto argv = nbd_argv(o, "/bin/zcstore_nbd", "chan", two_cores);
  EXPECT_EQ(argv.front(), "/bin/zcstore_nbd");
  EXPECT_EQ(values_of(argv, "--socket"), words{"/tmp/s.sock"});
  EXPECT_EQ(values_of(argv, "--command-channel-name"), words{"chan"});
  EXPECT_EQ(values_of(argv, "--cpu"), (words{"0", "1"}));
  EXPECT_EQ(values_of(argv, "--poll-mode"), words{"event"});
  EXPECT_EQ(values_of(argv, "--export-name"), words{"disk"});
  EXPECT_FALSE(contains(argv, "--execution-strategy"));
}

TEST(zero_copy_plan, backing_dir_gives_the_target_its_file) {
  const auto o = parsed({"--backing-dir", "/var/zc"});
  EXPECT_EQ(backing_file(o, 0), "/var/zc/target-0.img");
  EXPECT_EQ(values_of(target_argv(o, "t", std::nullopt, two_cores), "--backing-file"),
            words{"/var/zc/target-0.img"});
  EXPECT_FALSE(contains(target_argv(parsed({}), "t", std::nullopt, two_cores), "--backing-file"));
}

}  // namespace
}  // namespace zc::local
