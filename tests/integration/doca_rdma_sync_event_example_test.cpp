// examples/doca/rdma_sync_event, seed 003's sync event requester/responder written against the
// DOCA API only and built with meson + pkg-config, run in two processes over zcstore's shared
// memory and TCP: the requester sets the responder's event remotely, reads it back until the
// responder (waiting on the CPU, without a progress loop) answered, then adds to it remotely.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "integration/doca_example.hpp"
#include "support/subprocess.hpp"

namespace zc::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr auto run_timeout = 90s;

class doca_rdma_sync_event_example : public ::testing::TestWithParam<const char*>,
                                     protected doca::example_scratch {
 protected:
  // Built (or brought up to date) once per test process.
  static void SetUpTestSuite() { example_ = doca::build_example("rdma_sync_event"); }

  void SetUp() override { prepare(example_, "zc-doca-sync-event"); }
  void TearDown() override { clean(); }

  std::vector<std::string> args(const std::string& role, const std::string& local,
                                const std::string& remote, const std::string& value) const {
    return {(example_.dir / "doca_rdma_sync_event").string(),
            "--role",
            role,
            "-d",
            GetParam(),
            "-ld",
            path(local),
            "-re",
            path(remote),
            "-se",
            path("responder.se"),
            "-v",
            value};
  }

  static inline doca::built_example example_;
};

TEST_P(doca_rdma_sync_event_example, requester_and_responder_exchange_exact_values) {
  subprocess responder(args("responder", "responder.desc", "requester.desc", "4242"),
                       doca::ucx_env());
  subprocess requester(args("requester", "requester.desc", "responder.desc", "4242"),
                       doca::ucx_env());
  auto req = requester.wait(run_timeout);
  auto resp = responder.wait(run_timeout);
  ASSERT_TRUE(req.has_value()) << requester.output();
  ASSERT_TRUE(resp.has_value()) << responder.output();
  EXPECT_EQ(*req, 0) << requester.output();
  EXPECT_EQ(*resp, 0) << responder.output();
  EXPECT_NE(responder.output().find("Sync event set by the requester: 4242"), std::string::npos)
      << responder.output();
  EXPECT_NE(requester.output().find("The responder answered 4243"), std::string::npos)
      << requester.output();
  EXPECT_NE(requester.output().find("Notified completion (the event held 4243)"), std::string::npos)
      << requester.output();
  EXPECT_NE(responder.output().find("Completion notified by the requester"), std::string::npos)
      << responder.output();
}

TEST_P(doca_rdma_sync_event_example, responder_refuses_a_value_it_did_not_expect) {
  subprocess responder(args("responder", "responder.desc", "requester.desc", "3"), doca::ucx_env());
  subprocess requester(args("requester", "requester.desc", "responder.desc", "9"), doca::ucx_env());
  auto req = requester.wait(run_timeout);
  auto resp = responder.wait(run_timeout);
  ASSERT_TRUE(resp.has_value()) << responder.output();
  EXPECT_EQ(*resp, 1) << responder.output();
  EXPECT_NE(responder.output().find("Sync event holds 9, expected 3"), std::string::npos)
      << responder.output();
  ASSERT_TRUE(req.has_value()) << requester.output();
  EXPECT_NE(*req, 0) << requester.output();  // its peer went away before answering
}

INSTANTIATE_TEST_SUITE_P(devices, doca_rdma_sync_event_example, ::testing::Values("sm", "tcp"));

}  // namespace
}  // namespace zc::test
