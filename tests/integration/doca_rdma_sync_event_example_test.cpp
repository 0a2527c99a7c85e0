// examples/doca/rdma_sync_event, seed 003's sync event requester/responder written against the
// DOCA API only and built with meson + pkg-config, run in two processes over zcstore's shared
// memory and TCP: the requester sets the responder's event remotely, reads it back until the
// responder (progressing its engine while it waits) answered, then adds to it remotely.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "integration/doca_example.hpp"

namespace zc::test {
namespace {

class doca_rdma_sync_event_example : public ::testing::TestWithParam<const char*>,
                                     protected doca::example_scratch {
 protected:
  void SetUp() override { prepare("rdma_sync_event", "zc-doca-sync-event"); }
  void TearDown() override { clean(); }

  std::vector<std::string> args(const std::string& role, const std::string& local,
                                const std::string& remote, const std::string& value) const {
    return side_args(role, GetParam(), local, remote, {"-se", path("responder.se"), "-v", value});
  }
};

TEST_P(doca_rdma_sync_event_example, requester_and_responder_exchange_exact_values) {
  auto [responder, requester] =
      doca::run_pair(args("responder", "responder.desc", "requester.desc", "4242"),
                     args("requester", "requester.desc", "responder.desc", "4242"));
  EXPECT_EQ(requester.status, 0) << requester.output;
  EXPECT_EQ(responder.status, 0) << responder.output;
  EXPECT_NE(responder.output.find("Sync event set by the requester: 4242"), std::string::npos)
      << responder.output;
  EXPECT_NE(requester.output.find("The responder answered 4243"), std::string::npos)
      << requester.output;
  EXPECT_NE(requester.output.find("Notified completion (the event held 4243)"), std::string::npos)
      << requester.output;
  EXPECT_NE(responder.output.find("Completion notified by the requester"), std::string::npos)
      << responder.output;
}

TEST_P(doca_rdma_sync_event_example, responder_refuses_a_value_it_did_not_expect) {
  auto [responder, requester] =
      doca::run_pair(args("responder", "responder.desc", "requester.desc", "3"),
                     args("requester", "requester.desc", "responder.desc", "9"));
  EXPECT_EQ(responder.status, 1) << responder.output;
  EXPECT_NE(responder.output.find("Sync event holds 9, expected 3"), std::string::npos)
      << responder.output;
  ASSERT_NE(requester.status, -1) << requester.output;  // it ended within the bound
  EXPECT_NE(requester.status, 0) << requester.output;   // its peer went away before answering
}

INSTANTIATE_TEST_SUITE_P(devices, doca_rdma_sync_event_example, ::testing::Values("sm", "tcp"));

}  // namespace
}  // namespace zc::test
