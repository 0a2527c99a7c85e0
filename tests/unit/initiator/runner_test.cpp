// A worker's run against a service played by a test thread (tests/unit/host/fake_service.hpp),
// which moves data between its own storage and the host's IO region as a target would: exactly
// run_limit transactions, validity tests that pass on good data and fail on bad data with the
// storage offset, an IO error that ends the run, and a stop request that drains it.
#include "runner.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/engine_owned.hpp"
#include "host/session.hpp"
#include "support/subprocess.hpp"
#include "unit/host/fake_service.hpp"

namespace zc::initiator {
namespace {

using namespace std::chrono_literals;
constexpr auto wait_limit = 10s;
constexpr uint64_t capacity = 64 * 4096;

struct run_fixture : ::testing::Test {
  std::string name = zc::test::unique_name("initiator-run");
  zc::test::fake_service service{name, 4096, capacity};
  std::unique_ptr<host::session> session;
  std::unique_ptr<execution_plan> plan;
  core::engine_owned<worker_run> run;
  std::string content;  // expected-content file of the validity tests

  void start(execution_strategy strategy, uint64_t run_limit, uint32_t transactions = 4) {
    session = std::make_unique<host::session>(host::session_options{
        .channel_name = name, .control_timeout = 5s, .poll_mode = core::poll_mode::event});
    const auto info = session->query();
    plan = std::make_unique<execution_plan>(plan_request{.strategy = strategy,
                                                         .storage_capacity = info.capacity,
                                                         .block_size = info.block_size,
                                                         .worker_count = 1,
                                                         .transaction_count = transactions,
                                                         .run_limit = run_limit},
                                            content);
    session->init(plan->local_region_size(), plan->transaction_count(), 1);
    auto& w = session->add_worker(0, {.slots = plan->workers()[0].transaction_count});
    run = core::engine_owned<worker_run>::build(
        w.thread(),
        [p = plan.get(), q = w.queue(), r = &session->region(), e = &w.thread().engine()] {
          return std::make_unique<worker_run>(*p, 0, *q, *r, *e);
        },
        wait_limit);
    session->wait_ready();
    session->start();
    w.thread().call([r = run.get()] { r->start(); });
  }

  bool wait_done() {
    auto& w = *session->workers()[0];
    return w.thread().wait_until([r = run.get()] { return r->done(); }, wait_limit);
  }
  void TearDown() override {
    run.reset();
    session.reset();
  }
};

TEST_F(run_fixture, a_throughput_run_performs_exactly_the_run_limit) {
  start(execution_strategy::read_throughput_test, 37);
  ASSERT_TRUE(wait_done());
  EXPECT_EQ(run->failure(), "");
  EXPECT_EQ(run->completed(), 37u);
  EXPECT_EQ(service.ios(), 37u);
  auto& w = *session->workers()[0];
  auto stats = w.thread().call([r = run.get()] { return r->stats(); });
  EXPECT_EQ(stats.operation_count, 37u);
  EXPECT_GT(stats.end_time, stats.start_time);
}

TEST_F(run_fixture, read_write_validity_passes_when_the_storage_keeps_the_data) {
  start(execution_strategy::read_write_data_validity_test, 100);
  ASSERT_TRUE(wait_done());
  EXPECT_EQ(run->failure(), "");
  EXPECT_EQ(run->completed(), 100u);
  EXPECT_EQ(service.ios(), 200u);  // a write and a read each
}

TEST_F(run_fixture, read_only_validity_fails_on_storage_that_does_not_hold_the_content) {
  // The fake's storage is zeroes; the expected content file holds 0x01 0x02 ... from byte 1 on.
  const auto path = std::filesystem::temp_directory_path() / zc::test::unique_name("expected");
  {
    std::ofstream f(path, std::ios::binary);
    for (uint64_t i = 0; i < capacity; ++i) f.put(static_cast<char>(i % 251));
  }
  content = path.string();
  start(execution_strategy::read_only_data_validity_test, 8, 1);
  ASSERT_TRUE(wait_done());
  std::filesystem::remove(path);
  EXPECT_NE(run->failure().find("does not match"), std::string::npos) << run->failure();
  EXPECT_NE(run->failure().find("storage offset 0x0"), std::string::npos) << run->failure();
  EXPECT_NE(run->failure().find("01 02 03"), std::string::npos) << run->failure();
  EXPECT_EQ(run->completed(), 0u);
}

TEST_F(run_fixture, an_io_error_ends_the_run_and_names_the_offset_and_the_status) {
  uint64_t n = 0;
  service.answer_with([&n](storage::io_message_view& v) {
    if (++n == 5) v.set_result(status::io_failed);
    return true;
  });
  start(execution_strategy::read_throughput_test, 1000, 2);
  ASSERT_TRUE(wait_done());
  EXPECT_NE(run->failure().find("IO error at storage offset"), std::string::npos);
  EXPECT_NE(run->failure().find("IO_FAILED"), std::string::npos) << run->failure();
  EXPECT_LT(run->completed(), 1000u);
}

TEST_F(run_fixture, a_stop_request_drains_the_run_early) {
  start(execution_strategy::read_throughput_test, 100'000'000, 4);
  auto& w = *session->workers()[0];
  w.thread().call([r = run.get()] { r->request_stop(); });
  ASSERT_TRUE(wait_done());
  EXPECT_EQ(run->failure(), "");
  EXPECT_LT(run->completed(), 100'000'000u);
}

}  // namespace
}  // namespace zc::initiator
