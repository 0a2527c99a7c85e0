// examples/doca/rdma_send_receive, a C program written against the DOCA API only, built the way
// a DOCA sample is built (its own meson.build, doca-common and doca-rdma found by pkg-config,
// here the build tree's .pc files of libzcstore-doca), then run as a receiver and a sender in
// two processes over zcstore's shared memory and TCP: each message is checked byte for byte by
// the receiver, and both exit statuses are checked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "integration/doca_example.hpp"
#include "support/subprocess.hpp"

namespace zc::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr auto run_timeout = 90s;
constexpr int message_count = 20;

class doca_rdma_example : public ::testing::Test, protected doca::example_scratch {
 protected:
  // Built (or brought up to date) once per test process.
  static void SetUpTestSuite() { example_ = doca::build_example("rdma_send_receive"); }

  void SetUp() override { prepare(example_, "zc-doca-run"); }
  void TearDown() override { clean(); }

  std::string program() const { return (example_.dir / "doca_rdma_send_receive").string(); }

  struct outcome {
    int receiver_status = -1;
    int sender_status = -1;
    std::string receiver_output;
    std::string sender_output;
  };

  outcome run_pair(const std::string& device, const std::string& sent, const std::string& expected,
                   std::map<std::string, std::string> env = {}) {
    const std::string count = std::to_string(message_count);
    return run_pair_with(
        {program(), "--role", "receive", "-d", device, "-ld", path("receiver.desc"), "-re",
         path("sender.desc"), "-n", count, "-s", expected},
        {program(), "--role", "send", "-d", device, "-ld", path("sender.desc"), "-re",
         path("receiver.desc"), "-n", count, "-s", sent},
        std::move(env));
  }

  outcome run_pair_with(std::vector<std::string> receiver_args,
                        std::vector<std::string> sender_args,
                        std::map<std::string, std::string> env = {}) {
    for (auto& [k, v] : doca::ucx_env()) env.emplace(k, v);
    subprocess receiver(receiver_args, env);
    subprocess sender(sender_args, env);
    outcome o;
    auto r = receiver.wait(run_timeout);
    auto s = sender.wait(run_timeout);
    o.receiver_status = r ? *r : -1;
    o.sender_status = s ? *s : -1;
    o.receiver_output = receiver.output();
    o.sender_output = sender.output();
    return o;
  }

  void expect_every_message(const outcome& o, const std::string& text) {
    EXPECT_EQ(o.receiver_status, 0) << o.receiver_output;
    EXPECT_EQ(o.sender_status, 0) << o.sender_output;
    for (int i = 0; i < message_count; ++i) {
      const std::string line =
          "Received message " + std::to_string(i) + ": " + text + " #" + std::to_string(i);
      EXPECT_NE(o.receiver_output.find(line), std::string::npos) << line << "\n"
                                                                 << o.receiver_output;
    }
    const std::string n = std::to_string(message_count);
    EXPECT_NE(o.receiver_output.find("Received " + n + " messages, " + n + " verified"),
              std::string::npos)
        << o.receiver_output;
    EXPECT_NE(o.sender_output.find("Sent " + n + " messages"), std::string::npos)
        << o.sender_output;
  }

  static inline doca::built_example example_;
};

TEST_F(doca_rdma_example, send_receive_pair_over_shared_memory) {
  auto o = run_pair("sm", "Hi DOCA RDMA over sm", "Hi DOCA RDMA over sm");
  expect_every_message(o, "Hi DOCA RDMA over sm");
}

TEST_F(doca_rdma_example, send_receive_pair_over_tcp) {
  auto o = run_pair("tcp", "Hi DOCA RDMA over tcp", "Hi DOCA RDMA over tcp");
  expect_every_message(o, "Hi DOCA RDMA over tcp");
}

TEST_F(doca_rdma_example, mlx5_name_follows_the_device_environment) {
  auto o = run_pair("mlx5_0", "via mlx5_0", "via mlx5_0", {{"ZCSTORE_DOCA_DEVICE", "tcp"}});
  expect_every_message(o, "via mlx5_0");
  EXPECT_NE(o.receiver_output.find("RDMA context is running"), std::string::npos);
}

TEST_F(doca_rdma_example, receiver_reports_a_message_that_differs) {
  auto o = run_pair("sm", "what was sent", "what was expected");
  EXPECT_EQ(o.receiver_status, 1) << o.receiver_output;
  EXPECT_NE(o.receiver_output.find("Message 0: got 16 bytes \"what was sent #0\""),
            std::string::npos)
      << o.receiver_output;
}

// The flags are doca_argp's: the receiver reads its own from a JSON file (DOCA's sections), the
// sender spells them --name=value.
TEST_F(doca_rdma_example, flags_come_from_doca_argp_and_a_json_file) {
  const std::string count = std::to_string(message_count);
  const auto config = path("receiver.json");
  std::ofstream(config) << R"({"doca_general_flags": {"log-level": 50},
    "doca_program_flags": {"role": "receive", "device": "sm", "local-descriptor-path": ")"
                        << path("receiver.desc") << R"(", "remote-descriptor-path": ")"
                        << path("sender.desc") << R"(", "count": )" << count
                        << R"(, "send-string": "from json"}})";
  auto o =
      run_pair_with({program(), "-j", config}, {program(), "--role=send", "--device=sm",
                                                "--local-descriptor-path=" + path("sender.desc"),
                                                "--remote-descriptor-path=" + path("receiver.desc"),
                                                "--count=" + count, "--send-string=from json"});
  expect_every_message(o, "from json");
}

TEST_F(doca_rdma_example, a_bad_command_line_exits_2_with_the_reason_and_the_usage) {
  subprocess missing({program(), "--role", "send", "-d", "sm", "-ld", path("x.desc")},
                     doca::ucx_env());
  auto status = missing.wait(run_timeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, 2);
  EXPECT_NE(missing.output().find("missing mandatory flag '--remote-descriptor-path'"),
            std::string::npos)
      << missing.output();
  EXPECT_NE(missing.output().find("-re, --remote-descriptor-path <path>"), std::string::npos)
      << missing.output();

  subprocess help({program(), "-h"}, doca::ucx_env());
  status = help.wait(run_timeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, 0);
  EXPECT_NE(help.output().find("Usage: doca_rdma_send_receive [DOCA Flags] [Program Flags]"),
            std::string::npos)
      << help.output();
}

}  // namespace
}  // namespace zc::test
