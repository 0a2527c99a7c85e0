// zcstore_local gga's options and the command lines it builds for the generator, the three
// targets, the gga service and the initiator: pure functions, no process started.
#include "gga_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "gga_launcher.hpp"

namespace zc::local {
namespace {

using words = std::vector<std::string>;

const std::vector<uint32_t> two_cores{0, 1};
const std::array<uint16_t, 3> ports{1001, 1002, 1003};

words values_of(const words& argv, const std::string& flag) {
  words out;
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag) out.push_back(argv[i + 1]);
  return out;
}

bool contains(const words& argv, const std::string& word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

gga_options parsed(const words& args) {
  auto result = parse_gga_options(args);
  EXPECT_FALSE(result.exit_code) << "exit code " << result.exit_code.value_or(-1);
  return result.options;
}

std::optional<int> exit_code_of(const words& args) {
  return parse_gga_options(args).exit_code;
}

TEST(gga_options, defaults) {
  const gga_options o = parsed({});
  EXPECT_EQ(o.common.block_size, 8192u);
  EXPECT_EQ(o.common.target_size, 16ull << 20);
  EXPECT_TRUE(o.common.content.empty());
  EXPECT_EQ(o.matrix_type, "vandermonde");
  EXPECT_EQ(o.recovery_every, 0u);
  EXPECT_EQ(o.common.workers, 1u);
  EXPECT_EQ(o.common.poll_mode, "adaptive");
  EXPECT_EQ(o.common.control_timeout_seconds, 5u);
  EXPECT_EQ(o.common.device, "auto");
}

TEST(gga_options, parses_every_option) {
  const gga_options o =
      parsed({"--content",         "/p.bin", "--block-size", "4096", "--matrix-type", "cauchy",
              "--recovery-every",  "3",      "--workers",    "2",    "--poll-mode",   "event",
              "--control-timeout", "9",      "-d",           "tcp",  "--bin-dir",     "/b",
              "--target-size",     "1MiB"});
  EXPECT_EQ(o.common.content, "/p.bin");
  EXPECT_EQ(o.common.block_size, 4096u);
  EXPECT_EQ(o.matrix_type, "cauchy");
  EXPECT_EQ(o.recovery_every, 3u);
  EXPECT_EQ(o.common.workers, 2u);
  EXPECT_EQ(o.common.poll_mode, "event");
  EXPECT_EQ(o.common.control_timeout_seconds, 9u);
  EXPECT_EQ(o.common.device, "tcp");
  EXPECT_EQ(o.common.bin_dir, "/b");
  EXPECT_EQ(o.common.target_size, 1ull << 20);
}

TEST(gga_options, bad_command_lines_exit_2) {
  for (const words& args :
       {words{"--matrix-type", "rs"}, words{"--block-size", "100"}, words{"--block-size", "0"},
        words{"--target-size", "1000"}, words{"--workers", "0"}, words{"--no-such-flag"},
        words{"--", "--command-channel-name", "x"}, words{"--recovery-every"}})
    EXPECT_EQ(exit_code_of(args), std::optional<int>(2)) << args.front();
  EXPECT_EQ(exit_code_of({"--help"}), std::optional<int>(0));
}

TEST(gga_plan, generator_gets_the_host_block_size_matrix_and_three_images) {
  const gga_options o = parsed({"--matrix-type", "cauchy", "--block-size", "4096"});
  const gga_images images = gga_image_paths("/tmp/x");
  EXPECT_EQ(images.data_1, "/tmp/x/data_1.sbc");
  EXPECT_EQ(images.data_p, "/tmp/x/data_p.sbc");
  const words argv = generator_argv(o, "gen", "/tmp/x/plain.bin", images);
  EXPECT_EQ(argv.front(), "gen");
  EXPECT_EQ(values_of(argv, "--original-input-data"), words{"/tmp/x/plain.bin"});
  EXPECT_EQ(values_of(argv, "--block-size"), words{"4096"});
  EXPECT_EQ(values_of(argv, "--matrix-type"), words{"cauchy"});
  EXPECT_EQ(values_of(argv, "--data-1"), words{images.data_1});
  EXPECT_EQ(values_of(argv, "--data-2"), words{images.data_2});
  EXPECT_EQ(values_of(argv, "--data-p"), words{images.data_p});
}

TEST(gga_plan, target_serves_its_image_on_a_free_port) {
  const gga_options o = parsed({"--workers", "3", "--poll-mode", "event", "-l", "50"});
  const words argv = gga_target_argv(o, "t", "/i/data_2.sbc", two_cores);
  EXPECT_EQ(values_of(argv, "--binary-content"), words{"/i/data_2.sbc"});
  EXPECT_EQ(values_of(argv, "--listen-port"), words{"0"});
  EXPECT_EQ(values_of(argv, "--listen-address"), words{"127.0.0.1"});
  EXPECT_EQ(values_of(argv, "--cpu"), (words{"0", "1", "0"}));
  EXPECT_EQ(values_of(argv, "--poll-mode"), words{"event"});
  EXPECT_EQ(values_of(argv, "--log-level"), words{"50"});
  EXPECT_FALSE(contains(argv, "--block-count"));  // the image carries its geometry
}

TEST(gga_plan, service_gets_the_three_ports_matrix_and_recovery) {
  const gga_options o =
      parsed({"--matrix-type", "cauchy", "--recovery-every", "3", "--control-timeout", "7"});
  const words argv = gga_service_argv(o, "s", "chan", ports, two_cores);
  EXPECT_EQ(values_of(argv, "-r"), words{"auto"});
  EXPECT_EQ(values_of(argv, "--data-1-storage"), words{"127.0.0.1:1001"});
  EXPECT_EQ(values_of(argv, "--data-2-storage"), words{"127.0.0.1:1002"});
  EXPECT_EQ(values_of(argv, "--data-p-storage"), words{"127.0.0.1:1003"});
  EXPECT_EQ(values_of(argv, "--command-channel-name"), words{"chan"});
  EXPECT_EQ(values_of(argv, "--matrix-type"), words{"cauchy"});
  EXPECT_EQ(values_of(argv, "--trigger-recovery-read-every-n"), words{"3"});
  EXPECT_EQ(values_of(argv, "--control-timeout"), words{"7"});
  EXPECT_EQ(values_of(argv, "--cpu"), words{"0"});
}

TEST(gga_plan, service_cores_follow_the_initiators_cpu_flags) {
  const gga_options o = parsed({"--", "--cpu", "1", "--cpu", "0"});
  EXPECT_EQ(values_of(gga_service_argv(o, "s", "c", ports, two_cores), "--cpu"), (words{"0", "1"}));
}

TEST(gga_plan, initiator_defaults_to_a_validity_run_against_the_plain_file) {
  const gga_options o = parsed({"--poll-mode", "event"});
  const words argv = gga_initiator_argv(o, "i", "chan", "/tmp/plain.bin", two_cores);
  EXPECT_EQ(values_of(argv, "--command-channel-name"), words{"chan"});
  EXPECT_EQ(values_of(argv, "--execution-strategy"), words{"read_only_data_validity_test"});
  EXPECT_EQ(values_of(argv, "--run-limit-operation-count"), words{"20000"});
  EXPECT_EQ(values_of(argv, "--storage-plain-content"), words{"/tmp/plain.bin"});
  EXPECT_EQ(values_of(argv, "--poll-mode"), words{"event"});
  EXPECT_EQ(values_of(argv, "--cpu"), words{"0"});
}

TEST(gga_plan, initiator_words_after_the_separator_replace_the_defaults) {
  const gga_options o = parsed({"--", "--execution-strategy", "read_throughput_test",
                                "--run-limit-operation-count=5", "--storage-plain-content", "/o"});
  const words argv = gga_initiator_argv(o, "i", "chan", "/tmp/plain.bin", two_cores);
  EXPECT_EQ(values_of(argv, "--execution-strategy"), words{"read_throughput_test"});
  EXPECT_EQ(values_of(argv, "--storage-plain-content"), words{"/o"});
  EXPECT_TRUE(contains(argv, "--run-limit-operation-count=5"));
  EXPECT_FALSE(contains(argv, "20000"));
}

TEST(gga_plan, generated_content_compresses_and_has_the_asked_size) {
  const std::string text = compressible_text(100'000);
  EXPECT_EQ(text.size(), 100'000u);
  EXPECT_NE(text.find("of the gga pipeline\n"), std::string::npos);
  EXPECT_EQ(compressible_text(0).size(), 0u);
}

TEST(gga_plan, backing_dir_gives_each_target_its_own_file) {
  auto result = parse_gga_options({"--backing-dir", "/d", "--nbd", "/tmp/g.sock"});
  ASSERT_FALSE(result.exit_code);
  for (uint32_t n = 0; n < 3; ++n) {
    const auto argv = gga_target_argv(result.options, "t", "image", {0}, n);
    const auto at = std::find(argv.begin(), argv.end(), "--backing-file");
    ASSERT_NE(at, argv.end());
    EXPECT_EQ(*(at + 1), "/d/target-" + std::to_string(n) + ".img");
  }
  EXPECT_EQ(result.options.common.nbd_socket, "/tmp/g.sock");
}

// Behind zcstore_nbd the servers outlive it (zcstore_local starts another in its place); behind
// an initiator they end with its session, as the reference's do.
TEST(gga_plan, servers_keep_serving_behind_nbd_only) {
  const std::array<uint16_t, 3> ports{1, 2, 3};
  const gga_options served = parsed({"--nbd", "/tmp/g.sock"});
  EXPECT_TRUE(contains(gga_target_argv(served, "t", "image", two_cores, 0), "--keep-serving"));
  EXPECT_TRUE(contains(gga_service_argv(served, "s", "c", ports, two_cores), "--keep-serving"));
  const gga_options one_run = parsed({});
  EXPECT_FALSE(contains(gga_target_argv(one_run, "t", "image", two_cores, 0), "--keep-serving"));
  EXPECT_FALSE(contains(gga_service_argv(one_run, "s", "c", ports, two_cores), "--keep-serving"));
}

}  // namespace
}  // namespace zc::local
