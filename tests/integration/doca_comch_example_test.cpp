// examples/doca/comch_ping_pong, a C program written against the DOCA API only, built the way a
// DOCA sample is built (its own meson.build, doca-common and doca-comch found by pkg-config, here
// the build tree's .pc files of libzcstore-doca), then run as a Comch server and a client in two
// processes: every ping and pong is checked byte for byte by the side that receives it, and both
// exit statuses are checked.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "integration/doca_example.hpp"
#include "support/subprocess.hpp"

namespace zc::test {
namespace {

constexpr int ping_count = 20;

class doca_comch_example : public ::testing::Test, protected doca::example_scratch {
 protected:
  void SetUp() override {
    prepare("comch_ping_pong", "zc-doca-comch");
    channel_ = unique_name("doca-comch-example");
  }
  void TearDown() override { clean(); }

  std::vector<std::string> side(const std::string& role, const std::string& text,
                                int count = ping_count) const {
    return {program(), "--role", role, "-d", "sm", "--name", channel_, "-n", std::to_string(count),
            "-t",      text};
  }

  std::string channel_;
};

TEST_F(doca_comch_example, ping_pong_between_a_server_and_a_client_process) {
  const std::string text = "Hi DOCA Comch over a socket";
  auto [server, client] = doca::run_pair(side("server", text), side("client", text));
  EXPECT_EQ(server.status, 0) << server.output;
  EXPECT_EQ(client.status, 0) << client.output;
  for (int i = 0; i < ping_count; ++i) {
    const std::string ping = "Server got: ping #" + std::to_string(i) + " " + text;
    const std::string pong = "Client got: pong #" + std::to_string(i) + " " + text;
    EXPECT_NE(server.output.find(ping), std::string::npos) << ping << "\n" << server.output;
    EXPECT_NE(client.output.find(pong), std::string::npos) << pong << "\n" << client.output;
  }
  const std::string n = std::to_string(ping_count);
  EXPECT_NE(server.output.find("Server answered " + n + " pings"), std::string::npos)
      << server.output;
  EXPECT_NE(server.output.find("Server: the client disconnected after " + n + " pings"),
            std::string::npos)
      << server.output;
  EXPECT_NE(client.output.find("Client received " + n + " pongs, " + n + " verified"),
            std::string::npos)
      << client.output;
}

// The client may start first: it keeps dialling until the server is there.
TEST_F(doca_comch_example, a_client_started_before_its_server_waits_for_it) {
  subprocess client(side("client", "early", 3), doca::ucx_env());
  ASSERT_TRUE(client.wait_for_output("Client is connecting to " + channel_, doca::run_timeout))
      << client.output();
  subprocess server(side("server", "early", 3), doca::ucx_env());
  auto client_status = client.wait(doca::run_timeout);
  auto server_status = server.wait(doca::run_timeout);
  ASSERT_TRUE(client_status);
  ASSERT_TRUE(server_status);
  EXPECT_EQ(*client_status, 0) << client.output();
  EXPECT_EQ(*server_status, 0) << server.output();
  EXPECT_NE(client.output().find("Client received 3 pongs, 3 verified"), std::string::npos)
      << client.output();
}

// Two servers of one name: the second is refused (the name is served), the first serves on.
TEST_F(doca_comch_example, a_second_server_of_the_same_name_is_refused) {
  subprocess first(side("server", "taken", 1), doca::ucx_env());
  ASSERT_TRUE(first.wait_for_output("Server is running", doca::run_timeout)) << first.output();
  subprocess second(side("server", "taken", 1), doca::ucx_env());
  auto status = second.wait(doca::run_timeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, 1) << second.output();
  EXPECT_NE(second.output().find("is already served"), std::string::npos) << second.output();

  subprocess client(side("client", "taken", 1), doca::ucx_env());
  auto client_status = client.wait(doca::run_timeout);
  auto first_status = first.wait(doca::run_timeout);
  ASSERT_TRUE(client_status);
  ASSERT_TRUE(first_status);
  EXPECT_EQ(*client_status, 0) << client.output();
  EXPECT_EQ(*first_status, 0) << first.output();
}

TEST_F(doca_comch_example, a_bad_role_exits_2_with_the_reason) {
  subprocess bad({program(), "--role", "both", "-d", "sm"}, doca::ucx_env());
  auto status = bad.wait(doca::run_timeout);
  ASSERT_TRUE(status);
  EXPECT_EQ(*status, 2);
  EXPECT_NE(bad.output().find("--role is server or client, not both"), std::string::npos)
      << bad.output();
}

}  // namespace
}  // namespace zc::test
