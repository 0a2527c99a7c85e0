// target_set against in-process targets: a storage::tcp_server_channel on a thread each, which
// answers as its script says.
#include "service/target_set.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "support/subprocess.hpp"

namespace zc::service {
namespace {

using namespace std::chrono_literals;
using storage::message;
using storage::message_type;
using clock_type = std::chrono::steady_clock;

// What a fake target does with a request.
struct reaction {
  std::vector<message> replies;  // sent in order (none: stay silent)
  bool close = false;            // then drop the connection
};

class fake_target {
 public:
  using script = std::function<reaction(const message&)>;

  explicit fake_target(script s) : server_(0), script_(std::move(s)) {
    thread_ = std::thread([this] { run(); });
  }
  ~fake_target() {
    stop_ = true;
    thread_.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server_.port()); }
  std::vector<message> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }

 private:
  void run() {
    while (!stop_) {
      storage::receive_result r = storage::wait_for(server_, 20ms);
      if (!r.msg) continue;
      {
        std::lock_guard lock(mutex_);
        received_.push_back(*r.msg);
      }
      reaction what = script_(*r.msg);
      for (const auto& m : what.replies) (void)server_.send(m);
      if (what.close) {
        // Let the replies go out first.
        for (int i = 0; i < 5; ++i) (void)storage::wait_for(server_, 10ms);
        server_.close();
      }
    }
  }

  storage::tcp_server_channel server_;
  script script_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<message> received_;
  std::thread thread_;
};

reaction answer_as_expected(const message& m) {
  switch (m.type) {
    case message_type::query_storage_request:
      return {{storage::make_response(m, message_type::query_storage_response,
                                      storage::query_storage_response_payload{1 << 20, 4096})}};
    case message_type::start_storage_request:
      return {{storage::make_response(m, message_type::start_storage_response)}};
    case message_type::shutdown_request:
      return {{storage::make_response(m, message_type::shutdown_response)}};
    default:
      return {{storage::make_error_response(m, status::not_supported, "not in this script")}};
  }
}

target_request query(uint32_t cid) {
  return {message_type::query_storage_request, cid, storage::empty_payload{}};
}

TEST(target_set, one_message_id_counter_for_all_targets_and_the_clients_correlation_id) {
  fake_target a(answer_as_expected), b(answer_as_expected);
  target_set targets({a.address(), b.address()}, 5s);
  ASSERT_EQ(targets.size(), 2u);
  message r0 = targets.request(0, query(42), message_type::query_storage_response);
  message r1 = targets.request(1, query(42), message_type::query_storage_response);
  EXPECT_EQ(r0.message_id, 0u);
  EXPECT_EQ(r1.message_id, 1u);
  auto all = targets.request_all({message_type::start_storage_request, 7, storage::empty_payload{}},
                                 message_type::start_storage_response);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].message_id, 2u);
  EXPECT_EQ(all[1].message_id, 3u);
  EXPECT_EQ(targets.next_message_id(), 4u);

  auto seen_a = a.received(), seen_b = b.received();
  ASSERT_EQ(seen_a.size(), 2u);
  ASSERT_EQ(seen_b.size(), 2u);
  EXPECT_EQ(seen_a[0].message_id, 0u);
  EXPECT_EQ(seen_a[0].correlation_id, 42u);
  EXPECT_EQ(seen_b[0].message_id, 1u);
  EXPECT_EQ(seen_b[0].correlation_id, 42u);
  EXPECT_EQ(seen_a[1].correlation_id, 7u);
  EXPECT_EQ(seen_b[1].correlation_id, 7u);
  const auto& geometry = std::get<storage::query_storage_response_payload>(r0.payload);
  EXPECT_EQ(geometry.block_size, 4096u);
}

TEST(target_set, an_error_response_comes_back_for_the_caller_to_relay_with_the_clients_ids) {
  fake_target t([](const message& m) {
    return reaction{{storage::make_error_response(m, status::invalid_value, "bad")}};
  });
  target_set targets({t.address()}, 5s);
  message reply = targets.request(0, query(3), message_type::query_storage_response);
  ASSERT_EQ(reply.type, message_type::error_response);
  const message client_request{message_type::query_storage_request, 11, 12, {}};
  message relayed = relay(reply, client_request);
  EXPECT_EQ(relayed.type, message_type::error_response);
  EXPECT_EQ(relayed.message_id, 11u);
  EXPECT_EQ(relayed.correlation_id, 12u);
  const auto& e = std::get<storage::error_response_payload>(relayed.payload);
  EXPECT_EQ(e.error_code, status::invalid_value);
  EXPECT_EQ(e.message, "bad");
}

TEST(target_set, a_silent_target_is_time_out_at_the_control_timeout) {
  fake_target t([](const message&) { return reaction{}; });
  target_set targets({t.address()}, 300ms);
  try {
    (void)targets.request(0, query(0), message_type::query_storage_response);
    FAIL() << "no time-out";
  } catch (const target_lost&) {
    FAIL() << "a silent target is not a lost one";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::time_out);
  }
}

TEST(target_set, a_response_of_the_wrong_type_is_unexpected) {
  fake_target t([](const message& m) {
    return reaction{{storage::make_response(m, message_type::start_storage_response)}};
  });
  target_set targets({t.address()}, 5s);
  try {
    (void)targets.request(0, query(0), message_type::query_storage_response);
    FAIL() << "accepted";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::unexpected);
    EXPECT_EQ(std::string(e.what()),
              "Unexpected start_storage_response while expecting a query_storage_response");
  }
}

TEST(target_set, a_late_answer_with_another_id_is_dropped) {
  fake_target t([](const message& m) {
    message stale = storage::make_response(m, message_type::query_storage_response,
                                           storage::query_storage_response_payload{1, 1});
    stale.message_id = m.message_id + 100;
    return reaction{
        {stale, storage::make_response(m, message_type::query_storage_response,
                                       storage::query_storage_response_payload{2 << 20, 512})}};
  });
  target_set targets({t.address()}, 5s);
  message reply = targets.request(0, query(0), message_type::query_storage_response);
  EXPECT_EQ(std::get<storage::query_storage_response_payload>(reply.payload).block_size, 512u);
}

TEST(target_set, a_stream_of_stale_answers_is_a_broken_target_not_an_endless_wait) {
  fake_target t([](const message& m) {
    reaction r;
    for (uint32_t i = 0; i < 100; ++i) {
      message stale = storage::make_response(m, message_type::query_storage_response,
                                             storage::query_storage_response_payload{1, 1});
      stale.message_id = m.message_id + 1 + i;
      r.replies.push_back(stale);
    }
    return r;
  });
  target_set targets({t.address()}, 5s);
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)targets.request(0, query(0), message_type::query_storage_response);
    FAIL() << "no failure";
  } catch (const target_lost& e) {
    EXPECT_NE(std::string(e.what()).find("not asked"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(target_set, a_lost_connection_is_target_lost) {
  fake_target t([](const message&) { return reaction{{}, true}; });
  target_set targets({t.address()}, 5s);
  try {
    (void)targets.request(0, query(0), message_type::query_storage_response);
    FAIL() << "no failure";
  } catch (const target_lost& e) {
    EXPECT_NE(std::string(e.what()).find("connection lost"), std::string::npos) << e.what();
    EXPECT_EQ(e.target(), 0u);
  }
  EXPECT_FALSE(targets.connected(0));
  EXPECT_THROW(targets.check_connections(), target_lost);
}

TEST(target_set, check_connections_notices_a_target_that_went_away_between_requests) {
  auto t = std::make_unique<fake_target>(answer_as_expected);
  target_set targets({t->address()}, 5s);
  EXPECT_NO_THROW(targets.check_connections());
  t.reset();  // the listening socket and the connection close
  const auto deadline = clock_type::now() + 5s;
  bool lost = false;
  while (!lost && clock_type::now() < deadline) {
    try {
      targets.check_connections();
      std::this_thread::sleep_for(10ms);
    } catch (const target_lost&) {
      lost = true;
    }
  }
  EXPECT_TRUE(lost);
}

// A gga session that goes on degraded gives the lost target up: the fan-out and the health check
// pass it by, and the survivors still get their requests with one mid each.
TEST(target_set, a_forgotten_target_is_passed_by) {
  fake_target a(answer_as_expected), b(answer_as_expected);
  target_set targets({a.address(), b.address()}, 5s);
  targets.forget(0);
  EXPECT_TRUE(targets.forgotten(0));
  EXPECT_FALSE(targets.forgotten(1));
  EXPECT_FALSE(targets.connected(0));
  EXPECT_NO_THROW(targets.check_connections());
  const auto replies = targets.request_all({message_type::query_storage_request, 7, {}},
                                           message_type::query_storage_response);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].type, message_type::query_storage_response);
  EXPECT_EQ(targets.wait_fds().size(), 1u);
  // Asked on its own, it is lost, not a hang.
  EXPECT_THROW((void)targets.request(0, query(1), message_type::query_storage_response),
               target_lost);
}

// Keep-alive: a target that answers keep_alive_request stays; one that answers nothing at all is
// lost once the keep-alive timeout passed, while one that never got keep-alive turned on is not.
bool lost_within(target_set& targets, std::chrono::milliseconds bound) {
  const auto deadline = clock_type::now() + bound;
  while (clock_type::now() < deadline) {
    try {
      targets.check_connections();
    } catch (const target_lost&) {
      return true;
    }
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

reaction answer_keep_alive(const message& m) {
  if (m.type == message_type::keep_alive_request)
    return {{storage::make_response(m, message_type::keep_alive_response)}};
  return answer_as_expected(m);
}

TEST(target_set, a_target_that_answers_keep_alives_stays) {
  fake_target t(answer_keep_alive);
  target_set targets({t.address()}, 1s, 2s);
  EXPECT_FALSE(lost_within(targets, 3500ms));
  // Keep-alives went out about once a second, with their own message id, and no request's mid
  // was taken by them.
  const auto got = t.received();
  ASSERT_GE(got.size(), 2u);
  for (const auto& m : got) {
    EXPECT_EQ(m.type, message_type::keep_alive_request);
    EXPECT_EQ(m.message_id, storage::keep_alive_message_id);
  }
  EXPECT_EQ(targets.next_message_id(), 0u);
  // A keep-alive answer that arrives while a request waits is not a stale answer.
  EXPECT_EQ(targets.request(0, query(1), message_type::query_storage_response).type,
            message_type::query_storage_response);
}

TEST(target_set, a_silent_target_is_lost_at_the_keep_alive_timeout) {
  fake_target t([](const message&) { return reaction{}; });
  target_set targets({t.address()}, 1s, 2s);
  EXPECT_FALSE(lost_within(targets, 1500ms));
  EXPECT_TRUE(lost_within(targets, 3s));
}

TEST(target_set, without_keep_alive_a_silent_target_is_kept) {
  fake_target t([](const message&) { return reaction{}; });
  target_set targets({t.address()}, 1s);
  EXPECT_FALSE(lost_within(targets, 2500ms));
  EXPECT_TRUE(t.received().empty());
}

TEST(target_set, connecting_gives_up_at_the_control_timeout) {
  const std::string nobody = "127.0.0.1:" + std::to_string(test::free_tcp_port());
  try {
    target_set targets({nobody}, 300ms);
    FAIL() << "connected to nobody";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::time_out) << e.what();
  }
}

TEST(target_set, shutdown_all_tells_every_connected_target_and_never_throws) {
  fake_target a(answer_as_expected), b([](const message&) { return reaction{}; });
  target_set targets({a.address(), b.address()}, 300ms);
  targets.shutdown_all(5);
  ASSERT_EQ(a.received().size(), 1u);
  EXPECT_EQ(a.received()[0].type, message_type::shutdown_request);
  EXPECT_EQ(a.received()[0].correlation_id, 5u);
  ASSERT_EQ(b.received().size(), 1u);
}

}  // namespace
}  // namespace zc::service
