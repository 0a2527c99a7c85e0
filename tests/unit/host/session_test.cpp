// The host side of a session against a service played by a test thread (fake_service.hpp): the
// request sequence and its ids, the IO region's export, the pairing of workers with the service's
// consumers, and how an IO completes: by user_data, with the response's result, once; late,
// duplicated and altered responses, a silent service and a vanished one.
#include "host/session.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "core/memory_map.hpp"
#include "support/subprocess.hpp"
#include "unit/host/fake_service.hpp"

namespace zc::host {
namespace {

using namespace std::chrono_literals;
using storage::io_message_type;
using storage::message_type;

constexpr auto wait_limit = 10s;

// Completions seen by a worker's callback (on its thread), waited for by the test.
struct completions {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::pair<uint32_t, status>> seen;

  std::function<void(uint32_t, status)> callback() {
    return [this](uint32_t slot, status s) {
      std::lock_guard lock(mutex);
      seen.emplace_back(slot, s);
      cv.notify_all();
    };
  }
  bool wait_for_count(size_t n, std::chrono::milliseconds limit = wait_limit) {
    std::unique_lock lock(mutex);
    return cv.wait_for(lock, limit, [&] { return seen.size() >= n; });
  }
  std::vector<std::pair<uint32_t, status>> snapshot() {
    std::lock_guard lock(mutex);
    return seen;
  }
};

struct host_fixture : ::testing::Test {
  std::string name = zc::test::unique_name("host-session");
  zc::test::fake_service service{name};
  completions done;

  std::unique_ptr<session> open(uint32_t workers, uint32_t slots = 4,
                                std::chrono::milliseconds io_timeout = wait_limit) {
    auto s = std::make_unique<session>(session_options{
        .channel_name = name, .control_timeout = 5s, .poll_mode = core::poll_mode::event});
    EXPECT_EQ(s->query().block_size, 4096u);
    s->init(1 << 16, slots, workers);
    for (uint32_t i = 0; i < workers; ++i)
      s->add_worker(0, {.slots = slots, .io_timeout = io_timeout, .on_complete = done.callback()});
    s->wait_ready();
    s->start();
    return s;
  }

  status submit(session& s, uint32_t worker, uint32_t slot, uint64_t storage_offset = 0) {
    auto& w = *s.workers()[worker];
    return w.thread().call([q = w.queue(), slot, storage_offset] {
      return q->submit(slot, {io_message_type::read, 4096, uint64_t(slot) * 4096, storage_offset});
    });
  }
};

TEST_F(host_fixture, a_session_walks_query_init_start_stop_shutdown_in_order) {
  auto s = open(1);
  s->stop();
  s->shutdown();
  EXPECT_EQ(service.requests(),
            (std::vector<message_type>{
                message_type::query_storage_request, message_type::init_storage_request,
                message_type::start_storage_request, message_type::stop_storage_request,
                message_type::shutdown_request}));
}

TEST_F(host_fixture, init_exports_a_page_rounded_region_the_service_can_map) {
  auto s = std::make_unique<session>(session_options{.channel_name = name});
  (void)s->query();
  s->init(5000, 8, 1);
  EXPECT_EQ(s->region().size() % 4096, 0u);
  EXPECT_GE(s->region().size(), 5000u);
  const auto init = service.init();
  EXPECT_EQ(init.transaction_count, 8u);
  EXPECT_EQ(init.core_count, 1u);
  auto imported = core::memory_map::import_pci(init.mmap_export);
  ASSERT_EQ(imported->size(), s->region().size());
  imported->data()[4999] = 0x5A;  // the same pages: no copy
  EXPECT_EQ(s->region().data()[4999], 0x5A);
  EXPECT_TRUE(has(imported->permissions(), core::access::rdma_write));
}

TEST_F(host_fixture, each_worker_sends_to_the_service_consumer_of_its_own_index) {
  auto s = open(2);
  ASSERT_EQ(submit(*s, 0, 0), status::success);
  ASSERT_TRUE(done.wait_for_count(1));
  EXPECT_EQ(service.lane_ios(0), 1u);
  EXPECT_EQ(service.lane_ios(1), 0u);
  ASSERT_EQ(submit(*s, 1, 0), status::success);
  ASSERT_EQ(submit(*s, 1, 1), status::success);
  ASSERT_TRUE(done.wait_for_count(3));
  EXPECT_EQ(service.lane_ios(1), 2u);
  for (auto& [slot, st] : done.snapshot()) EXPECT_EQ(st, status::success);
}

TEST_F(host_fixture, an_io_completes_with_the_result_the_service_returned) {
  auto s = open(1);
  service.answer_with([](storage::io_message_view& v) {
    v.set_result(status::io_failed);
    return true;
  });
  ASSERT_EQ(submit(*s, 0, 2), status::success);
  ASSERT_TRUE(done.wait_for_count(1));
  EXPECT_EQ(done.snapshot()[0], std::make_pair(2u, status::io_failed));
}

TEST_F(host_fixture, a_busy_slot_and_a_slot_out_of_range_are_refused) {
  auto s = open(1);
  service.answer_with([](storage::io_message_view&) { return false; });
  ASSERT_EQ(submit(*s, 0, 0), status::success);
  EXPECT_EQ(submit(*s, 0, 0), status::in_use);
  EXPECT_EQ(submit(*s, 0, 4), status::invalid_value);
}

TEST_F(host_fixture, a_duplicated_response_completes_the_io_once) {
  auto s = open(1);
  service.answer_twice(true);
  ASSERT_EQ(submit(*s, 0, 1), status::success);
  ASSERT_TRUE(done.wait_for_count(1));
  // The duplicate arrives too; give it time to be (not) counted.
  auto& w = *s->workers()[0];
  ASSERT_TRUE(
      w.thread().wait_until([q = w.queue()] { return q->stray_responses() == 1; }, wait_limit));
  EXPECT_EQ(done.snapshot().size(), 1u);
}

TEST_F(host_fixture, a_response_that_changed_the_offsets_fails_the_io) {
  auto s = open(1);
  service.answer_with([](storage::io_message_view& v) {
    v.set_requester_offset(v.requester_offset() + 4096);
    return true;
  });
  ASSERT_EQ(submit(*s, 0, 0), status::success);
  ASSERT_TRUE(done.wait_for_count(1));
  EXPECT_EQ(done.snapshot()[0].second, status::unexpected);
}

TEST_F(host_fixture, an_unanswered_io_gives_up_on_the_service_but_keeps_its_ios_until_it_goes) {
  // The service may still act on an IO it never answered, and on every other one in flight: past
  // the deadline the queue takes nothing more, but none of them is handed back (its memory
  // reused) while the service may still move data into or out of it. Once the service is gone,
  // they all complete with a failure.
  auto s = open(1, 4, 300ms);
  service.answer_with([](storage::io_message_view&) { return false; });
  ASSERT_EQ(submit(*s, 0, 3), status::success);
  ASSERT_EQ(submit(*s, 0, 1), status::success);
  auto& w = *s->workers()[0];
  ASSERT_TRUE(w.thread().wait_until([q = w.queue()] { return q->failure() == status::time_out; },
                                    wait_limit));
  EXPECT_EQ(submit(*s, 0, 2), status::bad_state);
  EXPECT_TRUE(done.snapshot().empty());
  EXPECT_EQ(w.thread().call([q = w.queue()] { return q->in_flight(); }), 2u);
  service.disconnect();
  status watched = status::success;
  for (auto deadline = std::chrono::steady_clock::now() + wait_limit;
       ok(watched) && std::chrono::steady_clock::now() < deadline;)
    watched = s->watch(100ms);
  ASSERT_TRUE(done.wait_for_count(2));
  for (auto& [slot, st] : done.snapshot()) EXPECT_NE(st, status::success);
}

TEST_F(host_fixture, a_vanished_service_fails_the_ios_in_flight_and_the_session) {
  auto s = open(1);
  service.answer_with([](storage::io_message_view&) { return false; });
  ASSERT_EQ(submit(*s, 0, 0), status::success);
  ASSERT_EQ(submit(*s, 0, 1), status::success);
  service.disconnect();
  // The loss is seen where the connection lives: on the control channel, which the session's
  // owner keeps polling during a run (watch).
  status watched = status::success;
  for (auto deadline = std::chrono::steady_clock::now() + wait_limit;
       ok(watched) && std::chrono::steady_clock::now() < deadline;)
    watched = s->watch(100ms);
  EXPECT_FALSE(ok(watched));
  ASSERT_TRUE(done.wait_for_count(2));
  for (auto& [slot, st] : done.snapshot()) EXPECT_NE(st, status::success);
  EXPECT_NE(submit(*s, 0, 2), status::success);
}

TEST(host_session, no_service_is_a_time_out_within_the_control_timeout) {
  const auto start = std::chrono::steady_clock::now();
  try {
    session s({.channel_name = zc::test::unique_name("nobody"), .control_timeout = 300ms});
    FAIL() << "connected to nobody";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::time_out);
    EXPECT_STREQ(e.what(), "Timed out trying to connect to storage");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, wait_limit);
}

TEST(host_session, an_error_response_names_the_request_and_keeps_the_code) {
  // A service that answers query with an error: played by a bare control server.
  const auto name = zc::test::unique_name("host-error");
  storage::comch_control_server server("", name);
  std::atomic<bool> quit{false};
  std::thread t([&] {
    while (!quit) {
      auto r = storage::wait_for(server, 5ms);
      if (r.msg)
        (void)server.send(storage::make_error_response(*r.msg, status::not_permitted, "go away"));
    }
  });
  try {
    session s({.channel_name = name});
    (void)s.query();
    ADD_FAILURE() << "no error";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::not_permitted);
    EXPECT_STREQ(e.what(), "query_storage_response id: 0 failed!: go away");
  }
  quit = true;
  t.join();
}

}  // namespace
}  // namespace zc::host
