// serve_client with a scripted handler and a comch client on another thread.
#include "service/client_session.hpp"

#include <gtest/gtest.h>

#include <future>
#include <stdexcept>
#include <thread>

#include "support/subprocess.hpp"

namespace zc::service {
namespace {

using namespace std::chrono_literals;
using storage::message;
using storage::message_type;
using clock_type = std::chrono::steady_clock;

class scripted_handler final : public request_handler {
 public:
  message on_query(const message&) override { throw std::runtime_error("boom"); }
  message on_init(const message&) override {
    throw status_error(status::not_permitted, "no init today");
  }
  message on_start(const message& r) override {
    return storage::make_response(r, message_type::start_storage_response);
  }
  message on_stop(const message& r) override {
    return storage::make_response(r, message_type::stop_storage_response);
  }
  message on_shutdown(const message& r) override {
    return storage::make_response(r, message_type::shutdown_response);
  }
  void check_health() override {}
  void abort(const std::string& why) noexcept override { aborted = why; }

  std::string aborted;
};

// A client that sends each request and collects each answer (bounded).
std::vector<message> play_client(const std::string& name, std::vector<message_type> requests,
                                 bool vanish_after) {
  std::vector<message> answers;
  storage::comch_control_client client("auto", name, clock_type::now() + 10s);
  uint32_t id = 100;
  for (auto type : requests) {
    if (client.send({type, id, id + 1000, storage::empty_payload{}}) != status::success) break;
    storage::receive_result r = storage::wait_for(client, 10s);
    if (!r.msg) break;
    answers.push_back(*r.msg);
    ++id;
  }
  if (vanish_after) client.close();
  return answers;
}

TEST(client_session, handler_failures_and_wrong_types_become_error_responses_with_the_clients_ids) {
  const std::string name = test::unique_name("zc_client_session");
  storage::comch_control_server server("", name);
  client_link link(server);
  scripted_handler handler;
  auto client =
      std::async(std::launch::async, play_client, name,
                 std::vector<message_type>{
                     message_type::query_storage_request, message_type::start_storage_request,
                     message_type::start_storage_request, message_type::stop_storage_request,
                     message_type::shutdown_request},
                 false);
  EXPECT_EQ(serve_client(link, handler, 50ms), session_outcome::completed);
  ASSERT_EQ(client.wait_for(20s), std::future_status::ready);
  const auto answers = client.get();
  ASSERT_EQ(answers.size(), 5u);
  // Any exception, not only a status_error, is an answer (the reference died, §8.3).
  EXPECT_EQ(answers[0].type, message_type::error_response);
  EXPECT_EQ(answers[0].message_id, 100u);
  EXPECT_EQ(answers[0].correlation_id, 1100u);
  EXPECT_EQ(std::get<storage::error_response_payload>(answers[0].payload).error_code,
            status::unknown);
  EXPECT_EQ(std::get<storage::error_response_payload>(answers[0].payload).message, "boom");
  // One message per stage: the start came while init was expected.
  EXPECT_EQ(answers[1].type, message_type::error_response);
  EXPECT_EQ(answers[1].message_id, 101u);
  EXPECT_EQ(std::get<storage::error_response_payload>(answers[1].payload).error_code,
            status::unexpected);
  EXPECT_EQ(std::get<storage::error_response_payload>(answers[1].payload).message,
            "Unexpected start_storage_request while expecting a init_storage_request");
  EXPECT_EQ(answers[2].type, message_type::start_storage_response);
  EXPECT_EQ(answers[2].correlation_id, 1102u);
  EXPECT_EQ(answers[3].type, message_type::stop_storage_response);
  EXPECT_EQ(answers[4].type, message_type::shutdown_response);
  EXPECT_TRUE(handler.aborted.empty());
}

TEST(client_session, shutdown_is_honoured_at_any_stage) {
  const std::string name = test::unique_name("zc_client_session");
  storage::comch_control_server server("", name);
  client_link link(server);
  scripted_handler handler;
  auto client = std::async(std::launch::async, play_client, name,
                           std::vector<message_type>{message_type::shutdown_request}, false);
  EXPECT_EQ(serve_client(link, handler, 50ms), session_outcome::completed);
  ASSERT_EQ(client.wait_for(20s), std::future_status::ready);
  const auto answers = client.get();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].type, message_type::shutdown_response);
}

TEST(client_session, a_client_that_leaves_mid_session_fails_it_and_aborts_the_handler) {
  const std::string name = test::unique_name("zc_client_session");
  storage::comch_control_server server("", name);
  client_link link(server);
  scripted_handler handler;
  auto client = std::async(std::launch::async, play_client, name,
                           std::vector<message_type>{message_type::query_storage_request}, true);
  EXPECT_EQ(serve_client(link, handler, 50ms), session_outcome::failed);
  ASSERT_EQ(client.wait_for(20s), std::future_status::ready);
  EXPECT_EQ(client.get().size(), 1u);
  EXPECT_NE(handler.aborted.find("client connection lost"), std::string::npos) << handler.aborted;
}

}  // namespace
}  // namespace zc::service
