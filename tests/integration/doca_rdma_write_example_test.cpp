// examples/doca/rdma_write, seed 003's write requester/responder written against the DOCA API
// only and built with meson + pkg-config, run in two processes over zcstore's shared memory and
// TCP: the responder exports memory for RDMA write, the requester writes a string into it, and
// the responder checks its memory holds exactly that string.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "integration/doca_example.hpp"

namespace zc::test {
namespace {

class doca_rdma_write_example : public ::testing::TestWithParam<const char*>,
                                protected doca::example_scratch {
 protected:
  void SetUp() override { prepare("rdma_write", "zc-doca-write"); }
  void TearDown() override { clean(); }

  std::vector<std::string> args(const std::string& role, const std::string& local,
                                const std::string& remote, const std::string& text) const {
    return side_args(role, GetParam(), local, remote, {"-m", path("responder.mmap"), "-w", text});
  }
};

TEST_P(doca_rdma_write_example, requester_writes_into_the_responder_memory) {
  const std::string text = std::string("written over ") + GetParam();
  auto [responder, requester] =
      doca::run_pair(args("responder", "responder.desc", "requester.desc", text),
                     args("requester", "requester.desc", "responder.desc", text));
  EXPECT_EQ(requester.status, 0) << requester.output;
  EXPECT_EQ(responder.status, 0) << responder.output;
  EXPECT_NE(requester.output.find("Write completed: \"" + text + "\""), std::string::npos)
      << requester.output;
  EXPECT_NE(responder.output.find("Responder memory holds: " + text), std::string::npos)
      << responder.output;
}

TEST_P(doca_rdma_write_example, responder_refuses_memory_that_does_not_hold_the_string) {
  auto [responder, requester] =
      doca::run_pair(args("responder", "responder.desc", "requester.desc", "expected text"),
                     args("requester", "requester.desc", "responder.desc", "other text"));
  EXPECT_EQ(responder.status, 1) << responder.output;
  EXPECT_NE(responder.output.find("Memory holds \"other text\", expected \"expected text\""),
            std::string::npos)
      << responder.output;
}

INSTANTIATE_TEST_SUITE_P(devices, doca_rdma_write_example, ::testing::Values("sm", "tcp"));

}  // namespace
}  // namespace zc::test
