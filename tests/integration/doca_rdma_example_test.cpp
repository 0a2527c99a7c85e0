// examples/doca/rdma_send_receive, a C program written against the DOCA API only, built the way
// a DOCA sample is built (its own meson.build, doca-common and doca-rdma found by pkg-config,
// here the build tree's .pc files of libzcstore-doca), then run as a receiver and a sender in
// two processes over zcstore's shared memory and TCP: each message is checked byte for byte by
// the receiver, and both exit statuses are checked.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "integration/doca_example.hpp"
#include "support/subprocess.hpp"

namespace zc::test {
namespace {

constexpr int message_count = 20;

class doca_rdma_example : public ::testing::Test, protected doca::example_scratch {
 protected:
  void SetUp() override { prepare("rdma_send_receive", "zc-doca-run"); }
  void TearDown() override { clean(); }

  // The receiver and the sender of message_count messages; the receiver expects `expected`.
  std::pair<doca::outcome, doca::outcome> run_pair(const std::string& device,
                                                   const std::string& sent,
                                                   const std::string& expected,
                                                   std::map<std::string, std::string> env = {}) {
    const std::string count = std::to_string(message_count);
    return doca::run_pair(
        side_args("receive", device, "receiver.desc", "sender.desc", {"-n", count, "-s", expected}),
        side_args("send", device, "sender.desc", "receiver.desc", {"-n", count, "-s", sent}),
        std::move(env));
  }

  void expect_every_message(const std::pair<doca::outcome, doca::outcome>& pair,
                            const std::string& text) {
    const auto& [receiver, sender] = pair;
    EXPECT_EQ(receiver.status, 0) << receiver.output;
    EXPECT_EQ(sender.status, 0) << sender.output;
    for (int i = 0; i < message_count; ++i) {
      const std::string line =
          "Received message " + std::to_string(i) + ": " + text + " #" + std::to_string(i);
      EXPECT_NE(receiver.output.find(line), std::string::npos) << line << "\n" << receiver.output;
    }
    const std::string n = std::to_string(message_count);
    EXPECT_NE(receiver.output.find("Received " + n + " messages, " + n + " verified"),
              std::string::npos)
        << receiver.output;
    EXPECT_NE(sender.output.find("Sent " + n + " messages"), std::string::npos) << sender.output;
  }
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
  EXPECT_NE(o.first.output.find("RDMA context is running"), std::string::npos);
}

TEST_F(doca_rdma_example, receiver_reports_a_message_that_differs) {
  auto [receiver, sender] = run_pair("sm", "what was sent", "what was expected");
  EXPECT_EQ(receiver.status, 1) << receiver.output;
  EXPECT_NE(receiver.output.find("Message 0: got 16 bytes \"what was sent #0\""), std::string::npos)
      << receiver.output;
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
  auto o = doca::run_pair(
      {program(), "-j", config},
      {program(), "--role=send", "--device=sm", "--local-descriptor-path=" + path("sender.desc"),
       "--remote-descriptor-path=" + path("receiver.desc"), "--count=" + count,
       "--send-string=from json"});
  expect_every_message(o, "from json");
}

TEST_F(doca_rdma_example, a_bad_command_line_exits_2_with_the_reason_and_the_usage) {
  subprocess missing({program(), "--role", "send", "-d", "sm", "-ld", path("x.desc")},
                     doca::ucx_env());
  auto status = missing.wait(doca::run_timeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, 2);
  EXPECT_NE(missing.output().find("missing mandatory flag '--remote-descriptor-path'"),
            std::string::npos)
      << missing.output();
  EXPECT_NE(missing.output().find("-re, --remote-descriptor-path <path>"), std::string::npos)
      << missing.output();

  subprocess help({program(), "-h"}, doca::ucx_env());
  status = help.wait(doca::run_timeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, 0);
  EXPECT_NE(help.output().find("Usage: doca_rdma_send_receive [DOCA Flags] [Program Flags]"),
            std::string::npos)
      << help.output();
}

}  // namespace
}  // namespace zc::test
