// doca_comch.h as a DOCA program sees it: a server and a client of this process, each on its own
// progress engine, reach RUNNING through doca_pe_progress(); messages go both ways byte for byte
// on the right connection; the message size limit, connect and disconnect events, and the
// checks on every argument.
#include <doca_comch.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_pe.h>
#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "support/subprocess.hpp"
#include "unit/doca/two_engines.hpp"

namespace {

using namespace std::chrono_literals;
using zc::doca::testing::open_device;

// The longest sleep between two passes: a client's redial is a deadline, which does not wake a
// notification handle (doca_pe.h).
constexpr int max_sleep_ms = 20;

// Progresses both engines until done() holds, sleeping on their notification handles between
// passes; false when `limit` passed first.
template <typename Done>
bool progress_until(doca_pe* a, doca_pe* b, Done done, std::chrono::seconds limit = 10s) {
  doca_notification_handle_t fa = -1;
  doca_notification_handle_t fb = -1;
  EXPECT_EQ(doca_pe_get_notification_handle(a, &fa), DOCA_SUCCESS);
  EXPECT_EQ(doca_pe_get_notification_handle(b, &fb), DOCA_SUCCESS);
  const int poll_set = epoll_create1(EPOLL_CLOEXEC);
  for (int fd : {fa, fb}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    EXPECT_EQ(epoll_ctl(poll_set, EPOLL_CTL_ADD, fd, &ev), 0);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  bool held = true;
  while (true) {
    doca_pe_progress(a);
    doca_pe_progress(b);
    if (done()) break;
    if (std::chrono::steady_clock::now() > deadline) {
      held = false;
      break;
    }
    doca_pe_request_notification(a);
    doca_pe_request_notification(b);
    epoll_event events[2];
    epoll_wait(poll_set, events, 2, max_sleep_ms);
    doca_pe_clear_notification(a, fa);
    doca_pe_clear_notification(b, fb);
  }
  close(poll_set);
  return held;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 7);
  return bytes;
}

// What one end saw, reached from every callback through its context's user data.
struct end_log {
  std::vector<std::pair<doca_ctx_states, doca_ctx_states>> states;
  std::vector<std::pair<std::vector<uint8_t>, doca_comch_connection*>> messages;
  std::vector<doca_comch_connection*> connected;
  std::vector<doca_comch_connection*> disconnected;
  int completed = 0;
  int failed = 0;
  doca_error_t last_error = DOCA_SUCCESS;

  doca_ctx_states state() const {
    return states.empty() ? DOCA_CTX_STATE_IDLE : states.back().second;
  }
};

// The four counters of a connection, in doca_comch_counter's order.
std::vector<uint64_t> counters(doca_comch_connection* c) {
  std::vector<uint64_t> values;
  for (auto counter : {DOCA_COMCH_COUNTER_SENT_MESSAGES, DOCA_COMCH_COUNTER_SENT_BYTES,
                       DOCA_COMCH_COUNTER_RECV_MESSAGES, DOCA_COMCH_COUNTER_RECV_BYTES}) {
    uint64_t value = ~uint64_t{0};
    EXPECT_EQ(doca_comch_connection_get_counter(c, counter, &value), DOCA_SUCCESS);
    values.push_back(value);
  }
  return values;
}

end_log& log_of(doca_ctx* ctx) {
  doca_data d{};
  EXPECT_EQ(doca_ctx_get_user_data(ctx, &d), DOCA_SUCCESS);
  return *static_cast<end_log*>(d.ptr);
}

// The end a connection belongs to, found as a DOCA program finds it.
doca_ctx* ctx_of(doca_comch_connection* c) {
  if (auto* server = doca_comch_server_get_server_ctx(c); server != nullptr)
    return doca_comch_server_as_ctx(server);
  return doca_comch_client_as_ctx(doca_comch_client_get_client_ctx(c));
}

void on_state(const doca_data user_data, doca_ctx*, doca_ctx_states previous,
              doca_ctx_states next) {
  static_cast<end_log*>(user_data.ptr)->states.emplace_back(previous, next);
}

void on_message(doca_comch_event_msg_recv*, uint8_t* buffer, uint32_t len,
                doca_comch_connection* c) {
  log_of(ctx_of(c)).messages.emplace_back(std::vector<uint8_t>(buffer, buffer + len), c);
}

void on_connect(doca_comch_event_connection_status_changed*, doca_comch_connection* c,
                uint8_t successful) {
  EXPECT_EQ(successful, 1);
  log_of(ctx_of(c)).connected.push_back(c);
}

void on_disconnect(doca_comch_event_connection_status_changed*, doca_comch_connection* c,
                   uint8_t successful) {
  EXPECT_EQ(successful, 1);
  log_of(ctx_of(c)).disconnected.push_back(c);
}

void on_sent(doca_comch_task_send* task, doca_data, doca_data ctx_data) {
  EXPECT_EQ(doca_task_get_status(doca_comch_task_send_as_task(task)), DOCA_SUCCESS);
  static_cast<end_log*>(ctx_data.ptr)->completed++;
  doca_task_free(doca_comch_task_send_as_task(task));
}

void on_send_error(doca_comch_task_send* task, doca_data, doca_data ctx_data) {
  auto* log = static_cast<end_log*>(ctx_data.ptr);
  log->failed++;
  log->last_error = doca_task_get_status(doca_comch_task_send_as_task(task));
  doca_task_free(doca_comch_task_send_as_task(task));
}

constexpr uint32_t send_tasks = 4;

class doca_comch : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = open_device("sm");
    ASSERT_NE(dev_, nullptr);
    ASSERT_EQ(doca_pe_create(&server_pe_), DOCA_SUCCESS);
    ASSERT_EQ(doca_pe_create(&client_pe_), DOCA_SUCCESS);
    name_ = zc::test::unique_name("doca-comch");
  }

  void TearDown() override {
    for (doca_ctx* ctx : {client_ctx(), server_ctx()})
      if (ctx != nullptr && !zc::doca::testing::ctx_idle(ctx)) doca_ctx_stop(ctx);
    EXPECT_TRUE(progress_until(server_pe_, client_pe_, [&] {
      return (client_ == nullptr || zc::doca::testing::ctx_idle(client_ctx())) &&
             (server_ == nullptr || zc::doca::testing::ctx_idle(server_ctx()));
    }));
    if (client_ != nullptr) {
      EXPECT_EQ(doca_comch_client_destroy(client_), DOCA_SUCCESS);
    }
    if (server_ != nullptr) {
      EXPECT_EQ(doca_comch_server_destroy(server_), DOCA_SUCCESS);
    }
    if (client_pe_ != nullptr) {
      EXPECT_EQ(doca_pe_destroy(client_pe_), DOCA_SUCCESS);
    }
    if (server_pe_ != nullptr) {
      EXPECT_EQ(doca_pe_destroy(server_pe_), DOCA_SUCCESS);
    }
    if (dev_ != nullptr) {
      EXPECT_EQ(doca_dev_close(dev_), DOCA_SUCCESS);
    }
  }

  doca_ctx* server_ctx() {
    return server_ == nullptr ? nullptr : doca_comch_server_as_ctx(server_);
  }
  doca_ctx* client_ctx() {
    return client_ == nullptr ? nullptr : doca_comch_client_as_ctx(client_);
  }

  // A configured server, not started (without send tasks when `sends` is false). Call through
  // ASSERT_NO_FATAL_FAILURE.
  void make_server(doca_comch_event_connection_status_changed_cb_t connect = on_connect,
                   bool sends = true) {
    ASSERT_EQ(doca_comch_server_create(dev_, nullptr, name_.c_str(), &server_), DOCA_SUCCESS);
    if (sends) {
      ASSERT_EQ(doca_comch_server_task_send_set_conf(server_, on_sent, on_send_error, send_tasks),
                DOCA_SUCCESS);
    }
    ASSERT_EQ(doca_comch_server_event_msg_recv_register(server_, on_message), DOCA_SUCCESS);
    ASSERT_EQ(
        doca_comch_server_event_connection_status_changed_register(server_, connect, on_disconnect),
        DOCA_SUCCESS);
    ASSERT_EQ(doca_ctx_set_user_data(server_ctx(), doca_data{.ptr = &server_log_}), DOCA_SUCCESS);
    ASSERT_EQ(doca_ctx_set_state_changed_cb(server_ctx(), on_state), DOCA_SUCCESS);
    ASSERT_EQ(doca_pe_connect_ctx(server_pe_, server_ctx()), DOCA_SUCCESS);
  }

  // A configured client, not started.
  void make_client() {
    ASSERT_EQ(doca_comch_client_create(dev_, name_.c_str(), &client_), DOCA_SUCCESS);
    ASSERT_EQ(doca_comch_client_task_send_set_conf(client_, on_sent, on_send_error, send_tasks),
              DOCA_SUCCESS);
    ASSERT_EQ(doca_comch_client_event_msg_recv_register(client_, on_message), DOCA_SUCCESS);
    ASSERT_EQ(doca_ctx_set_user_data(client_ctx(), doca_data{.ptr = &client_log_}), DOCA_SUCCESS);
    ASSERT_EQ(doca_ctx_set_state_changed_cb(client_ctx(), on_state), DOCA_SUCCESS);
    ASSERT_EQ(doca_pe_connect_ctx(client_pe_, client_ctx()), DOCA_SUCCESS);
  }

  // Both started and RUNNING, the server having seen the connection.
  void connect_both() {
    ASSERT_EQ(doca_ctx_start(server_ctx()), DOCA_SUCCESS);
    // As DOCA's client: connecting is asynchronous.
    ASSERT_EQ(doca_ctx_start(client_ctx()), DOCA_ERROR_IN_PROGRESS);
    ASSERT_TRUE(progress_until(server_pe_, client_pe_,
                               [&] {
                                 return client_log_.state() == DOCA_CTX_STATE_RUNNING &&
                                        !server_log_.connected.empty();
                               }))
        << "client state " << client_log_.state();
  }

  doca_comch_connection* client_connection() {
    doca_comch_connection* c = nullptr;
    EXPECT_EQ(doca_comch_client_get_connection(client_, &c), DOCA_SUCCESS);
    return c;
  }

  doca_error_t send(doca_comch_connection* to, const std::vector<uint8_t>& bytes) {
    doca_comch_task_send* task = nullptr;
    const auto size = static_cast<uint32_t>(bytes.size());
    doca_error_t r =
        server_ != nullptr && doca_comch_server_get_server_ctx(to) == server_
            ? doca_comch_server_task_send_alloc_init(server_, to, bytes.data(), size, &task)
            : doca_comch_client_task_send_alloc_init(client_, to, bytes.data(), size, &task);
    if (r != DOCA_SUCCESS) return r;
    r = doca_task_submit(doca_comch_task_send_as_task(task));
    if (r != DOCA_SUCCESS) doca_task_free(doca_comch_task_send_as_task(task));
    return r;
  }

  doca_dev* dev_ = nullptr;
  doca_pe* server_pe_ = nullptr;
  doca_pe* client_pe_ = nullptr;
  doca_comch_server* server_ = nullptr;
  doca_comch_client* client_ = nullptr;
  std::string name_;
  end_log server_log_;
  end_log client_log_;
};

TEST_F(doca_comch, both_ends_reach_running_and_messages_arrive_byte_for_byte) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_NO_FATAL_FAILURE(connect_both());
  using states = std::vector<std::pair<doca_ctx_states, doca_ctx_states>>;
  EXPECT_EQ(server_log_.states, (states{{DOCA_CTX_STATE_IDLE, DOCA_CTX_STATE_RUNNING}}));
  EXPECT_EQ(client_log_.states, (states{{DOCA_CTX_STATE_IDLE, DOCA_CTX_STATE_STARTING},
                                        {DOCA_CTX_STATE_STARTING, DOCA_CTX_STATE_RUNNING}}));
  doca_comch_connection* at_server = server_log_.connected.at(0);
  EXPECT_EQ(doca_comch_server_get_server_ctx(at_server), server_);
  EXPECT_EQ(doca_comch_client_get_client_ctx(at_server), nullptr);
  doca_comch_connection* at_client = client_connection();
  ASSERT_NE(at_client, nullptr);
  EXPECT_EQ(doca_comch_client_get_client_ctx(at_client), client_);
  EXPECT_EQ(doca_comch_server_get_server_ctx(at_client), nullptr);

  // Connection user data is the program's.
  EXPECT_EQ(doca_comch_connection_get_user_data(at_server).u64, 0u);
  ASSERT_EQ(doca_comch_connection_set_user_data(at_server, doca_data{.u64 = 77}), DOCA_SUCCESS);
  EXPECT_EQ(doca_comch_connection_get_user_data(at_server).u64, 77u);

  // Client to server: the message is copied at allocation, so the buffer may change at once.
  auto request = pattern(4000, 3);
  const auto sent_request = request;
  doca_comch_task_send* task = nullptr;
  ASSERT_EQ(doca_comch_client_task_send_alloc_init(client_, at_client, request.data(),
                                                   static_cast<uint32_t>(request.size()), &task),
            DOCA_SUCCESS);
  request.assign(request.size(), 0xEE);
  ASSERT_EQ(doca_task_submit(doca_comch_task_send_as_task(task)), DOCA_SUCCESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return server_log_.messages.size() == 1 && client_log_.completed == 1;
  }));
  EXPECT_EQ(server_log_.messages[0].first, sent_request);
  EXPECT_EQ(server_log_.messages[0].second, at_server);

  // Server to client, on the connection the request came on.
  const auto reply = pattern(1, 200);
  const auto reply2 = pattern(4080, 9);
  ASSERT_EQ(send(at_server, reply), DOCA_SUCCESS);
  ASSERT_EQ(send(at_server, reply2), DOCA_SUCCESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return client_log_.messages.size() == 2 && server_log_.completed == 2;
  }));
  EXPECT_EQ(client_log_.messages[0].first, reply);
  EXPECT_EQ(client_log_.messages[1].first, reply2);
  EXPECT_EQ(client_log_.messages[0].second, at_client);
  EXPECT_EQ(server_log_.failed + client_log_.failed, 0);

  // Both ends counted what went each way, as of their last update_info.
  const uint64_t reply_bytes = reply.size() + reply2.size();
  EXPECT_EQ(counters(at_client), (std::vector<uint64_t>{0, 0, 0, 0}));  // no snapshot yet
  ASSERT_EQ(doca_comch_connection_update_info(at_client), DOCA_SUCCESS);
  ASSERT_EQ(doca_comch_connection_update_info(at_server), DOCA_SUCCESS);
  EXPECT_EQ(counters(at_client), (std::vector<uint64_t>{1, sent_request.size(), 2, reply_bytes}));
  EXPECT_EQ(counters(at_server), (std::vector<uint64_t>{2, reply_bytes, 1, sent_request.size()}));
  uint64_t value = 0;
  EXPECT_EQ(
      doca_comch_connection_get_counter(at_client, static_cast<doca_comch_counter>(5), &value),
      DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_connection_get_counter(at_client, DOCA_COMCH_COUNTER_SENT_BYTES, nullptr),
            DOCA_ERROR_INVALID_VALUE);

  // A stopped client's connection is gone.
  ASSERT_EQ(doca_ctx_stop(client_ctx()), DOCA_SUCCESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_,
                             [&] { return client_log_.state() == DOCA_CTX_STATE_IDLE; }));
  EXPECT_EQ(doca_comch_connection_update_info(at_client), DOCA_ERROR_CONNECTION_ABORTED);
}

// Two clients at once: each message arrives on its sender's connection, and an answer sent on
// that connection reaches that client only.
TEST_F(doca_comch, a_server_tells_its_clients_apart) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_NO_FATAL_FAILURE(connect_both());
  doca_comch_client* second = nullptr;
  end_log second_log;
  ASSERT_EQ(doca_comch_client_create(dev_, name_.c_str(), &second), DOCA_SUCCESS);
  doca_ctx* second_ctx = doca_comch_client_as_ctx(second);
  ASSERT_EQ(doca_comch_client_task_send_set_conf(second, on_sent, on_send_error, send_tasks),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_comch_client_event_msg_recv_register(second, on_message), DOCA_SUCCESS);
  ASSERT_EQ(doca_ctx_set_user_data(second_ctx, doca_data{.ptr = &second_log}), DOCA_SUCCESS);
  ASSERT_EQ(doca_ctx_set_state_changed_cb(second_ctx, on_state), DOCA_SUCCESS);
  ASSERT_EQ(doca_pe_connect_ctx(client_pe_, second_ctx), DOCA_SUCCESS);
  ASSERT_EQ(doca_ctx_start(second_ctx), DOCA_ERROR_IN_PROGRESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return second_log.state() == DOCA_CTX_STATE_RUNNING && server_log_.connected.size() == 2;
  }));

  doca_comch_connection* second_connection = nullptr;
  ASSERT_EQ(doca_comch_client_get_connection(second, &second_connection), DOCA_SUCCESS);
  const auto from_first = pattern(100, 1);
  const auto from_second = pattern(200, 2);
  ASSERT_EQ(send(client_connection(), from_first), DOCA_SUCCESS);
  doca_comch_task_send* task = nullptr;
  ASSERT_EQ(
      doca_comch_client_task_send_alloc_init(second, second_connection, from_second.data(),
                                             static_cast<uint32_t>(from_second.size()), &task),
      DOCA_SUCCESS);
  ASSERT_EQ(doca_task_submit(doca_comch_task_send_as_task(task)), DOCA_SUCCESS);
  ASSERT_TRUE(
      progress_until(server_pe_, client_pe_, [&] { return server_log_.messages.size() == 2; }));
  // Each message came on its sender's connection: answer each with its own bytes reversed.
  for (const auto& [bytes, connection] : server_log_.messages) {
    EXPECT_EQ(connection,
              bytes == from_first ? server_log_.connected[0] : server_log_.connected[1]);
    ASSERT_EQ(send(connection, std::vector<uint8_t>(bytes.rbegin(), bytes.rend())), DOCA_SUCCESS);
  }
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return client_log_.messages.size() == 1 && second_log.messages.size() == 1;
  }));
  EXPECT_EQ(client_log_.messages[0].first,
            std::vector<uint8_t>(from_first.rbegin(), from_first.rend()));
  EXPECT_EQ(second_log.messages[0].first,
            std::vector<uint8_t>(from_second.rbegin(), from_second.rend()));
  EXPECT_EQ(second_log.messages[0].second, second_connection);

  ASSERT_EQ(doca_ctx_stop(second_ctx), DOCA_SUCCESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return second_log.state() == DOCA_CTX_STATE_IDLE && server_log_.disconnected.size() == 1;
  }));
  EXPECT_EQ(server_log_.disconnected[0], server_log_.connected[1]);
  EXPECT_EQ(doca_comch_client_destroy(second), DOCA_SUCCESS);
}

TEST_F(doca_comch, a_message_over_the_smaller_max_size_is_refused_with_too_big) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_NO_FATAL_FAILURE(make_client());
  uint32_t size = 0;
  ASSERT_EQ(doca_comch_server_get_max_msg_size(server_, &size), DOCA_SUCCESS);
  EXPECT_EQ(size, 4080u);  // DOCA's default
  ASSERT_EQ(doca_comch_server_set_max_msg_size(server_, 64), DOCA_SUCCESS);
  ASSERT_EQ(doca_comch_server_get_max_msg_size(server_, &size), DOCA_SUCCESS);
  EXPECT_EQ(size, 64u);
  ASSERT_NO_FATAL_FAILURE(connect_both());

  doca_comch_connection* at_client = client_connection();
  doca_comch_task_send* task = nullptr;
  const auto too_big = pattern(65, 1);
  EXPECT_EQ(doca_comch_client_task_send_alloc_init(client_, at_client, too_big.data(), 65, &task),
            DOCA_ERROR_TOO_BIG);
  EXPECT_EQ(send(server_log_.connected.at(0), too_big), DOCA_ERROR_TOO_BIG);
  // Exactly the limit goes through, and nothing of the refused ones arrived.
  const auto fits = pattern(64, 2);
  ASSERT_EQ(send(at_client, fits), DOCA_SUCCESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return server_log_.messages.size() == 1 && client_log_.completed == 1;
  }));
  EXPECT_EQ(server_log_.messages[0].first, fits);
  EXPECT_TRUE(client_log_.messages.empty());
}

TEST_F(doca_comch, a_stopped_client_is_a_disconnect_at_the_server_which_keeps_serving) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_NO_FATAL_FAILURE(connect_both());
  doca_comch_connection* first = server_log_.connected.at(0);

  ASSERT_EQ(doca_ctx_stop(client_ctx()), DOCA_SUCCESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return server_log_.disconnected.size() == 1 && client_log_.state() == DOCA_CTX_STATE_IDLE;
  }));
  EXPECT_EQ(server_log_.disconnected[0], first);
  EXPECT_EQ(server_log_.state(), DOCA_CTX_STATE_RUNNING);
  doca_comch_connection* c = nullptr;
  EXPECT_EQ(doca_comch_client_get_connection(client_, &c), DOCA_ERROR_BAD_STATE);

  // The same client starts again and is a new connection.
  ASSERT_EQ(doca_ctx_start(client_ctx()), DOCA_ERROR_IN_PROGRESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return client_log_.state() == DOCA_CTX_STATE_RUNNING && server_log_.connected.size() == 2;
  }));
  const auto hello = pattern(10, 5);
  ASSERT_EQ(send(server_log_.connected[1], hello), DOCA_SUCCESS);
  ASSERT_TRUE(
      progress_until(server_pe_, client_pe_, [&] { return client_log_.messages.size() == 1; }));
  EXPECT_EQ(client_log_.messages[0].first, hello);
}

TEST_F(doca_comch, a_server_disconnect_ends_the_client) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_NO_FATAL_FAILURE(connect_both());
  doca_comch_connection* at_server = server_log_.connected.at(0);
  ASSERT_EQ(doca_comch_server_disconnect(server_, at_server), DOCA_SUCCESS);
  // The event comes from doca_pe_progress(), and the connection stays valid until it did.
  EXPECT_TRUE(server_log_.disconnected.empty());
  EXPECT_EQ(doca_comch_server_get_server_ctx(at_server), server_);
  EXPECT_EQ(doca_comch_server_disconnect(server_, at_server), DOCA_ERROR_NOT_CONNECTED);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return client_log_.state() == DOCA_CTX_STATE_IDLE && !server_log_.disconnected.empty();
  }));
  EXPECT_EQ(server_log_.disconnected, std::vector<doca_comch_connection*>{at_server});
  EXPECT_EQ(client_log_.states.back(),
            std::make_pair(DOCA_CTX_STATE_STOPPING, DOCA_CTX_STATE_IDLE));
}

TEST_F(doca_comch, a_stopped_server_disconnects_its_client) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_NO_FATAL_FAILURE(connect_both());
  doca_comch_connection* at_server = server_log_.connected.at(0);
  ASSERT_EQ(doca_ctx_stop(server_ctx()), DOCA_SUCCESS);
  EXPECT_TRUE(server_log_.disconnected.empty()) << "a callback ran inside doca_ctx_stop";
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return server_log_.state() == DOCA_CTX_STATE_IDLE && client_log_.state() == DOCA_CTX_STATE_IDLE;
  }));
  EXPECT_EQ(server_log_.disconnected, std::vector<doca_comch_connection*>{at_server});
  using states = std::vector<std::pair<doca_ctx_states, doca_ctx_states>>;
  EXPECT_EQ(server_log_.states, (states{{DOCA_CTX_STATE_IDLE, DOCA_CTX_STATE_RUNNING},
                                        {DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_STOPPING},
                                        {DOCA_CTX_STATE_STOPPING, DOCA_CTX_STATE_IDLE}}));
  EXPECT_EQ(client_log_.states.back(),
            std::make_pair(DOCA_CTX_STATE_STOPPING, DOCA_CTX_STATE_IDLE));

  // Both start again, and talk.
  ASSERT_NO_FATAL_FAILURE(connect_both());
  const auto again = pattern(33, 4);
  ASSERT_EQ(send(client_connection(), again), DOCA_SUCCESS);
  ASSERT_TRUE(
      progress_until(server_pe_, client_pe_, [&] { return server_log_.messages.size() == 1; }));
  EXPECT_EQ(server_log_.messages[0].first, again);
  EXPECT_EQ(server_log_.messages[0].second, server_log_.connected.at(1));
}

// A program that refuses a client from its connect callback, and goes on using the connection in
// that callback (DOCA programs do): the connection is valid until its disconnect callback, which
// comes from a later progress call.
void refuse_on_connect(doca_comch_event_connection_status_changed*, doca_comch_connection* c,
                       uint8_t) {
  auto& log = log_of(ctx_of(c));
  log.connected.push_back(c);
  EXPECT_EQ(doca_comch_server_disconnect(doca_comch_server_get_server_ctx(c), c), DOCA_SUCCESS);
  EXPECT_EQ(doca_comch_connection_set_user_data(c, doca_data{.u64 = 7}), DOCA_SUCCESS);
  EXPECT_EQ(doca_comch_connection_get_user_data(c).u64, 7u);
  EXPECT_TRUE(log.disconnected.empty());
}

TEST_F(doca_comch, a_client_refused_from_the_connect_callback_is_still_valid_in_it) {
  ASSERT_NO_FATAL_FAILURE(make_server(refuse_on_connect));
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_EQ(doca_ctx_start(server_ctx()), DOCA_SUCCESS);
  ASSERT_EQ(doca_ctx_start(client_ctx()), DOCA_ERROR_IN_PROGRESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return !server_log_.disconnected.empty() && client_log_.state() == DOCA_CTX_STATE_IDLE;
  }));
  ASSERT_EQ(server_log_.connected.size(), 1u);
  EXPECT_EQ(server_log_.disconnected, server_log_.connected);
}

// A server stopped from its own message callback: the connection the callback holds stays valid
// (a send on it is refused, not a use after free), and its disconnect comes from progress.
doca_error_t send_after_stop = DOCA_SUCCESS;
void stop_on_message(doca_comch_event_msg_recv*, uint8_t*, uint32_t, doca_comch_connection* c) {
  doca_comch_server* server = doca_comch_server_get_server_ctx(c);
  EXPECT_EQ(doca_ctx_stop(doca_comch_server_as_ctx(server)), DOCA_SUCCESS);
  const uint8_t reply[4] = {1, 2, 3, 4};
  doca_comch_task_send* task = nullptr;
  send_after_stop = doca_comch_server_task_send_alloc_init(server, c, reply, sizeof(reply), &task);
  EXPECT_TRUE(log_of(doca_comch_server_as_ctx(server)).disconnected.empty());
}

TEST_F(doca_comch, a_server_stopped_from_its_message_callback_keeps_the_connection_valid) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_EQ(doca_comch_server_event_msg_recv_register(server_, stop_on_message), DOCA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_NO_FATAL_FAILURE(connect_both());
  ASSERT_EQ(send(client_connection(), pattern(8, 1)), DOCA_SUCCESS);
  send_after_stop = DOCA_SUCCESS;
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return server_log_.state() == DOCA_CTX_STATE_IDLE && !server_log_.disconnected.empty();
  }));
  EXPECT_NE(send_after_stop, DOCA_SUCCESS);
  EXPECT_EQ(server_log_.disconnected, server_log_.connected);
}

// Destroying a context from its own message callback would free what zcstore's poll, on the
// stack below it, reads next: refused (IN_USE); after the progress call it succeeds.
// The callback also progresses its engine once more, as some programs do: the outer pass is still
// on the stack after the inner one returned.
doca_error_t destroy_in_callback = DOCA_SUCCESS;
doca_pe* nested_pe = nullptr;
void stop_and_destroy_on_message(doca_comch_event_msg_recv*, uint8_t*, uint32_t,
                                 doca_comch_connection* c) {
  doca_comch_client* client = doca_comch_client_get_client_ctx(c);
  EXPECT_EQ(doca_ctx_stop(doca_comch_client_as_ctx(client)), DOCA_SUCCESS);
  if (nested_pe != nullptr) doca_pe_progress(nested_pe);
  destroy_in_callback = doca_comch_client_destroy(client);
}

TEST_F(doca_comch, a_client_destroyed_from_its_message_callback_is_refused_in_use) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_EQ(doca_comch_client_event_msg_recv_register(client_, stop_and_destroy_on_message),
            DOCA_SUCCESS);
  ASSERT_NO_FATAL_FAILURE(connect_both());
  destroy_in_callback = DOCA_SUCCESS;
  nested_pe = client_pe_;
  const size_t before = client_log_.states.size();
  ASSERT_EQ(send(server_log_.connected.back(), pattern(8, 2)), DOCA_SUCCESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return destroy_in_callback != DOCA_SUCCESS && client_log_.states.size() > before &&
           client_log_.state() == DOCA_CTX_STATE_IDLE;
  }));
  nested_pe = nullptr;
  EXPECT_EQ(destroy_in_callback, DOCA_ERROR_IN_USE);
  // TearDown destroys it, outside any callback.
}

// A task freed while in flight is kept (zcstore still sends from its memory) and cannot be
// submitted twice: its completion still comes, and the program frees it there.
TEST_F(doca_comch, a_task_freed_in_flight_is_kept_until_its_completion) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_NO_FATAL_FAILURE(connect_both());
  const auto bytes = pattern(64, 9);
  doca_comch_task_send* task = nullptr;
  ASSERT_EQ(doca_comch_client_task_send_alloc_init(client_, client_connection(), bytes.data(),
                                                   static_cast<uint32_t>(bytes.size()), &task),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_task_submit(doca_comch_task_send_as_task(task)), DOCA_SUCCESS);
  doca_task_free(doca_comch_task_send_as_task(task));  // refused, with an error log
  EXPECT_EQ(doca_task_submit(doca_comch_task_send_as_task(task)), DOCA_ERROR_BAD_STATE);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return client_log_.completed == 1 && server_log_.messages.size() == 1;
  }));
  EXPECT_EQ(server_log_.messages[0].first, bytes);
  EXPECT_EQ(client_log_.failed, 0);
}

TEST_F(doca_comch, a_second_server_of_the_same_name_is_refused) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_EQ(doca_ctx_start(server_ctx()), DOCA_SUCCESS);
  doca_comch_server* other = nullptr;
  ASSERT_EQ(doca_comch_server_create(dev_, nullptr, name_.c_str(), &other), DOCA_SUCCESS);
  doca_pe* pe = nullptr;
  ASSERT_EQ(doca_pe_create(&pe), DOCA_SUCCESS);
  ASSERT_EQ(doca_pe_connect_ctx(pe, doca_comch_server_as_ctx(other)), DOCA_SUCCESS);
  EXPECT_EQ(doca_ctx_start(doca_comch_server_as_ctx(other)), DOCA_ERROR_IN_USE);
  EXPECT_EQ(doca_comch_server_destroy(other), DOCA_SUCCESS);
  EXPECT_EQ(doca_pe_destroy(pe), DOCA_SUCCESS);
}

// While it dials, the client is started but has no connection yet: CONNECTION_INPROGRESS (DOCA
// documents BAD_STATE for a client not started only); stopped, BAD_STATE again.
TEST_F(doca_comch, a_client_without_a_server_stays_starting_until_stopped) {
  ASSERT_NO_FATAL_FAILURE(make_client());
  doca_comch_connection* c = nullptr;
  EXPECT_EQ(doca_comch_client_get_connection(client_, &c), DOCA_ERROR_BAD_STATE);
  ASSERT_EQ(doca_ctx_start(client_ctx()), DOCA_ERROR_IN_PROGRESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_,
                             [&] { return client_log_.state() == DOCA_CTX_STATE_STARTING; }));
  EXPECT_EQ(doca_comch_client_get_connection(client_, &c), DOCA_ERROR_CONNECTION_INPROGRESS);
  EXPECT_EQ(c, nullptr);
  ASSERT_EQ(doca_ctx_stop(client_ctx()), DOCA_SUCCESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_,
                             [&] { return client_log_.state() == DOCA_CTX_STATE_IDLE; }));
  EXPECT_EQ(doca_comch_client_get_connection(client_, &c), DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(c, nullptr);
}

// A program that keeps its client's connection across a stop and a start: while the client is
// connecting again, the connection is being set up (update_info: CONNECTION_INPROGRESS, as DOCA
// documents for a connection not yet established), not failed; once RUNNING it is the same
// connection, established again.
TEST_F(doca_comch, a_restarted_clients_connection_is_in_progress_until_running) {
  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_NO_FATAL_FAILURE(connect_both());
  doca_comch_connection* kept = client_connection();
  ASSERT_NE(kept, nullptr);
  ASSERT_EQ(doca_comch_connection_update_info(kept), DOCA_SUCCESS);

  ASSERT_EQ(doca_ctx_stop(client_ctx()), DOCA_SUCCESS);
  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return client_log_.state() == DOCA_CTX_STATE_IDLE && server_log_.disconnected.size() == 1;
  }));
  EXPECT_EQ(doca_comch_connection_update_info(kept), DOCA_ERROR_CONNECTION_ABORTED);

  // Started: STARTING until a progress call sees the server's answer.
  ASSERT_EQ(doca_ctx_start(client_ctx()), DOCA_ERROR_IN_PROGRESS);
  doca_ctx_states state = DOCA_CTX_STATE_IDLE;
  ASSERT_EQ(doca_ctx_get_state(client_ctx(), &state), DOCA_SUCCESS);
  ASSERT_EQ(state, DOCA_CTX_STATE_STARTING);
  EXPECT_EQ(doca_comch_connection_update_info(kept), DOCA_ERROR_CONNECTION_INPROGRESS);
  doca_comch_connection* c = nullptr;
  EXPECT_EQ(doca_comch_client_get_connection(client_, &c), DOCA_ERROR_CONNECTION_INPROGRESS);
  EXPECT_EQ(c, nullptr);

  ASSERT_TRUE(progress_until(server_pe_, client_pe_, [&] {
    return client_log_.state() == DOCA_CTX_STATE_RUNNING && server_log_.connected.size() == 2;
  }));
  EXPECT_EQ(client_connection(), kept);
  EXPECT_EQ(doca_comch_connection_update_info(kept), DOCA_SUCCESS);
}

TEST_F(doca_comch, bad_arguments_are_refused) {
  doca_devinfo* info = doca_dev_as_devinfo(dev_);
  uint32_t value = 0;
  EXPECT_EQ(doca_comch_cap_server_is_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_comch_cap_client_is_supported(info), DOCA_SUCCESS);
  EXPECT_EQ(doca_comch_cap_server_is_supported(nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_cap_get_max_msg_size(nullptr, &value), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_cap_get_max_msg_size(info, nullptr), DOCA_ERROR_INVALID_VALUE);
  uint32_t max_msg = 0;
  uint32_t max_name = 0;
  uint32_t max_tasks = 0;
  ASSERT_EQ(doca_comch_cap_get_max_msg_size(info, &max_msg), DOCA_SUCCESS);
  ASSERT_EQ(doca_comch_cap_get_max_name_len(info, &max_name), DOCA_SUCCESS);
  ASSERT_EQ(doca_comch_cap_get_max_send_tasks(info, &max_tasks), DOCA_SUCCESS);
  ASSERT_EQ(doca_comch_cap_get_max_clients(info, &value), DOCA_SUCCESS);
  EXPECT_GT(value, 0u);
  ASSERT_EQ(doca_comch_cap_get_max_recv_queue_size(info, &value), DOCA_SUCCESS);
  EXPECT_GT(value, 0u);

  // Creation: device, name (1 to max_name - 1 bytes) and result are required.
  doca_comch_server* s = nullptr;
  doca_comch_client* c = nullptr;
  EXPECT_EQ(doca_comch_server_create(nullptr, nullptr, "x", &s), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_create(dev_, nullptr, nullptr, &s), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_create(dev_, nullptr, "", &s), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_create(dev_, nullptr, "x", nullptr), DOCA_ERROR_INVALID_VALUE);
  const std::string too_long(max_name, 'n');
  EXPECT_EQ(doca_comch_server_create(dev_, nullptr, too_long.c_str(), &s),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_client_create(dev_, too_long.c_str(), &c), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_client_create(nullptr, "x", &c), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_client_create(dev_, nullptr, &c), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_destroy(nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_client_destroy(nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_as_ctx(nullptr), nullptr);
  EXPECT_EQ(doca_comch_connection_update_info(nullptr), DOCA_ERROR_INVALID_VALUE);

  ASSERT_NO_FATAL_FAILURE(make_server());
  ASSERT_NO_FATAL_FAILURE(make_client());
  // Configuration.
  EXPECT_EQ(doca_comch_server_set_max_msg_size(server_, 0), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_set_max_msg_size(server_, max_msg + 1), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_client_set_recv_queue_size(client_, 0), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_task_send_set_conf(server_, nullptr, on_send_error, 1),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_task_send_set_conf(server_, on_sent, on_send_error, 0),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_client_task_send_set_conf(client_, on_sent, on_send_error, max_tasks + 1),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_event_msg_recv_register(server_, nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(
      doca_comch_server_event_connection_status_changed_register(server_, on_connect, nullptr),
      DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_get_max_msg_size(server_, nullptr), DOCA_ERROR_INVALID_VALUE);
  doca_dev* got = nullptr;
  ASSERT_EQ(doca_comch_client_get_device(client_, &got), DOCA_SUCCESS);
  EXPECT_EQ(got, dev_);
  doca_dev_rep* repr = reinterpret_cast<doca_dev_rep*>(1);
  ASSERT_EQ(doca_comch_server_get_device_repr(server_, &repr), DOCA_SUCCESS);
  EXPECT_EQ(repr, nullptr);
  // The fast path is not there yet: said, not crashed.
  EXPECT_EQ(doca_comch_server_event_consumer_register(server_, nullptr, nullptr),
            DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(doca_comch_client_event_consumer_register(client_, nullptr, nullptr),
            DOCA_ERROR_NOT_SUPPORTED);

  // Sending before running.
  const uint8_t byte = 1;
  doca_comch_task_send* task = nullptr;
  doca_comch_connection* conn = nullptr;
  EXPECT_EQ(doca_comch_client_get_connection(client_, &conn), DOCA_ERROR_BAD_STATE);

  ASSERT_NO_FATAL_FAILURE(connect_both());
  doca_comch_connection* at_client = client_connection();
  doca_comch_connection* at_server = server_log_.connected.at(0);
  // Settings change only while idle.
  EXPECT_EQ(doca_comch_server_set_max_msg_size(server_, 128), DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_comch_client_task_send_set_conf(client_, on_sent, on_send_error, 2),
            DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_comch_client_event_msg_recv_register(client_, on_message), DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_comch_server_destroy(server_), DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_comch_client_destroy(client_), DOCA_ERROR_BAD_STATE);
  // A send needs a message, a length, a result, and a connection of its own context.
  EXPECT_EQ(doca_comch_client_task_send_alloc_init(client_, at_client, nullptr, 1, &task),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_client_task_send_alloc_init(client_, at_client, &byte, 0, &task),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_client_task_send_alloc_init(client_, at_client, &byte, 1, nullptr),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_client_task_send_alloc_init(client_, at_server, &byte, 1, &task),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_task_send_alloc_init(server_, at_client, &byte, 1, &task),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_task_send_alloc_init(server_, nullptr, &byte, 1, &task),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_disconnect(server_, at_client), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_connection_set_user_data(nullptr, doca_data{}), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_comch_server_get_server_ctx(nullptr), nullptr);

  // Every send task in use: NO_MEMORY, nothing lost.
  std::vector<doca_comch_task_send*> taken;
  for (uint32_t i = 0; i < send_tasks; ++i) {
    ASSERT_EQ(doca_comch_client_task_send_alloc_init(client_, at_client, &byte, 1, &task),
              DOCA_SUCCESS);
    taken.push_back(task);
  }
  EXPECT_EQ(doca_comch_client_task_send_alloc_init(client_, at_client, &byte, 1, &task),
            DOCA_ERROR_NO_MEMORY);
  for (auto* t : taken) doca_task_free(doca_comch_task_send_as_task(t));
  EXPECT_EQ(server_log_.failed + client_log_.failed, 0);
}

TEST_F(doca_comch, sends_need_a_send_task_configuration) {
  ASSERT_NO_FATAL_FAILURE(make_server(on_connect, false));
  ASSERT_NO_FATAL_FAILURE(make_client());
  ASSERT_NO_FATAL_FAILURE(connect_both());
  const uint8_t byte = 1;
  doca_comch_task_send* task = nullptr;
  EXPECT_EQ(
      doca_comch_server_task_send_alloc_init(server_, server_log_.connected.at(0), &byte, 1, &task),
      DOCA_ERROR_BAD_STATE);
}

}  // namespace
