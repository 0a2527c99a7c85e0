// examples/doca/rdma_write, seed 003's write requester/responder written against the DOCA API
// only and built with meson + pkg-config, run in two processes over zcstore's shared memory and
// TCP: the responder exports memory for RDMA write, the requester writes a string into it, and
// the responder checks its memory holds exactly that string.
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

class doca_rdma_write_example : public ::testing::TestWithParam<const char*>,
                                protected doca::example_scratch {
 protected:
  // Built (or brought up to date) once per test process.
  static void SetUpTestSuite() { example_ = doca::build_example("rdma_write"); }

  void SetUp() override { prepare(example_, "zc-doca-write"); }
  void TearDown() override { clean(); }

  std::vector<std::string> args(const std::string& role, const std::string& local,
                                const std::string& remote, const std::string& text) const {
    return {(example_.dir / "doca_rdma_write").string(),
            "--role",
            role,
            "-d",
            GetParam(),
            "-ld",
            path(local),
            "-re",
            path(remote),
            "-m",
            path("responder.mmap"),
            "-w",
            text};
  }

  static inline doca::built_example example_;
};

TEST_P(doca_rdma_write_example, requester_writes_into_the_responder_memory) {
  const std::string text = std::string("written over ") + GetParam();
  subprocess responder(args("responder", "responder.desc", "requester.desc", text),
                       doca::ucx_env());
  subprocess requester(args("requester", "requester.desc", "responder.desc", text),
                       doca::ucx_env());
  auto req = requester.wait(run_timeout);
  auto resp = responder.wait(run_timeout);
  ASSERT_TRUE(req.has_value()) << requester.output();
  ASSERT_TRUE(resp.has_value()) << responder.output();
  EXPECT_EQ(*req, 0) << requester.output();
  EXPECT_EQ(*resp, 0) << responder.output();
  EXPECT_NE(requester.output().find("Write completed: \"" + text + "\""), std::string::npos)
      << requester.output();
  EXPECT_NE(responder.output().find("Responder memory holds: " + text), std::string::npos)
      << responder.output();
}

TEST_P(doca_rdma_write_example, responder_refuses_memory_that_does_not_hold_the_string) {
  subprocess responder(args("responder", "responder.desc", "requester.desc", "expected text"),
                       doca::ucx_env());
  subprocess requester(args("requester", "requester.desc", "responder.desc", "other text"),
                       doca::ucx_env());
  auto req = requester.wait(run_timeout);
  auto resp = responder.wait(run_timeout);
  ASSERT_TRUE(resp.has_value()) << responder.output();
  EXPECT_EQ(*resp, 1) << responder.output();
  EXPECT_NE(responder.output().find("Memory holds \"other text\", expected \"expected text\""),
            std::string::npos)
      << responder.output();
  (void)req;
}

INSTANTIATE_TEST_SUITE_P(devices, doca_rdma_write_example, ::testing::Values("sm", "tcp"));

}  // namespace
}  // namespace zc::test
