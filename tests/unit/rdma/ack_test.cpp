// Acknowledgements of sends between two real contexts: one leaves in the pass that delivered the
// message, whatever the receiver's caller does next; deadlines are never early; sequence numbers
// carry on across 2^32.
#include <cstring>

#include "rdma/internal/context_hooks.hpp"
#include "rdma_fixture.hpp"

namespace zc::rdma::testing {
namespace {

using namespace std::chrono_literals;

// The receiver's caller stops calling progress() right after the pass that delivered a message
// (a run loop that returns, a stalled application thread) for longer than the sender's task
// timeout: the acknowledgement must already have left in that pass.
TEST_P(rdma_pair, an_ack_leaves_in_the_pass_that_delivered_the_message) {
  a.task_timeout = 400ms;
  connect();
  b.thread.call([&] {
    b.submit<receive_task>(0, [&](receive_task& r) { r.set_dst(*b.local_buffer(0, 64, false)); });
    // A posted job runs after the pass that is running ends, before the next one starts.
    b.on_completion = [&](const completion& c) {
      if (c.kind == "receive") b.thread.post([] { std::this_thread::sleep_for(1500ms); });
    };
  });
  a.thread.call([&] {
    a.submit<send_task>(0, [&](send_task& s) { s.set_src(*a.local_buffer(0, 64, true)); });
  });
  ASSERT_TRUE(a.wait_for("send", 1, 5s));
  EXPECT_EQ(a.completions("send")[0].result, status::success);
  a.thread.call([&] { EXPECT_EQ(a.ctx->state(), core::context_state::running); });
  ASSERT_TRUE(b.wait_for("receive", 1, 5s));
  b.thread.call([&] { b.on_completion = nullptr; });
}

// A callback that runs long (here: sleeps past the task timeout) and then submits: the task's
// deadline counts from its submission, not from the start of the pass.
TEST_P(rdma_pair, a_task_submitted_at_the_end_of_a_long_pass_gets_its_whole_timeout) {
  a.task_timeout = 400ms;
  connect();
  b.thread.call([&] {
    b.submit<receive_task>(0, [&](receive_task& r) { r.set_dst(*b.local_buffer(0, 64, false)); });
  });
  a.thread.call([&] {
    a.submit<receive_task>(0,
                           [&](receive_task& r) { r.set_dst(*a.local_buffer(4096, 64, false)); });
    a.on_completion = [&](const completion& c) {
      if (c.kind != "receive") return;
      // The pass's time is read, as any source of the engine may read it early in the pass.
      (void)a.thread.engine().coarse_time();
      std::this_thread::sleep_for(600ms);
      a.submit<send_task>(0, [&](send_task& s) { s.set_src(*a.local_buffer(0, 64, true)); });
    };
  });
  b.thread.call([&] {
    b.submit<send_task>(0, [&](send_task& s) { s.set_src(*b.local_buffer(0, 64, true)); });
  });
  ASSERT_TRUE(a.wait_for("send", 1, 5s));
  EXPECT_EQ(a.completions("send")[0].result, status::success);
  a.thread.call([&] {
    a.on_completion = nullptr;
    EXPECT_EQ(a.ctx->state(), core::context_state::running);
  });
}

// Sequence numbers travel as their low 32 bits; both sides start just below 2^32 and exchange
// sends, refusals and acknowledgements across it.
TEST_P(rdma_pair, send_numbers_carry_on_across_2_to_the_32) {
  constexpr uint64_t first = (uint64_t(1) << 32) - 3;
  a.create(GetParam(), core::rdma_all);
  b.create(GetParam(), core::rdma_all);
  auto restart = [&](side& s) {
    return s.thread.call([&] {
      s.ctx->stop();
      internal::context_hooks::start_sequences_at(*s.ctx, first);
      EXPECT_EQ(s.ctx->start(), status::success);
      return s.ctx->export_connection();
    });
  };
  auto a_blob = restart(a);
  auto b_blob = restart(b);
  a.thread.call([&] { a.ctx->connect(b_blob); });
  b.thread.call([&] { b.ctx->connect(a_blob); });
  constexpr int count = 8;  // 2^32 - 3 ... 2^32 + 4
  for (side* to : {&a, &b}) {
    side& from = to == &a ? b : a;
    to->thread.call([&] {
      for (int i = 0; i < count; ++i)
        to->submit<receive_task>(
            i, [&](receive_task& r) { r.set_dst(*to->local_buffer(i * 64, 64, false)); });
    });
    from.thread.call([&] {
      for (int i = 0; i < count; ++i) {
        std::memset(from.region() + 65536 + i * 64, 0x30 + i, 64);
        from.submit<send_task>(
            i, [&](send_task& s) { s.set_src(*from.local_buffer(65536 + i * 64, 64, true)); });
      }
    });
  }
  for (side* s : {&a, &b}) {
    ASSERT_TRUE(s->wait_for("send", count, 5s));
    ASSERT_TRUE(s->wait_for("receive", count, 5s));
    for (auto& c : s->completions("send")) EXPECT_EQ(c.result, status::success);
    auto got = s->completions("receive");
    for (int i = 0; i < count; ++i) {
      ASSERT_EQ(got[i].result, status::success);
      EXPECT_EQ(got[i].task->get_user_data().u64, uint64_t(i));
      EXPECT_EQ(static_cast<receive_task*>(got[i].task)->dst().data()[0], 0x30 + i);
    }
  }
  // A refusal past the wrap names the right send: no receive is posted now.
  a.thread.call([&] {
    a.submit<send_task>(99, [&](send_task& s) { s.set_src(*a.local_buffer(0, 64, true)); });
  });
  ASSERT_TRUE(a.wait_for("send", count + 1, 5s));
  EXPECT_EQ(a.completions("send")[count].result, status::empty);
  a.thread.call([&] { EXPECT_EQ(a.ctx->state(), core::context_state::running); });
}

// (rdma_pair is instantiated for tcp and sm in context_test.cpp.)

// Deadlines are kept on the coarse clock: a timeout of a tick or two would be mostly its error.
TEST(rdma_task_timeout, one_shorter_than_a_few_clock_ticks_is_refused_with_a_clear_error) {
  core::engine_thread thread;
  thread.call([&] {
    context ctx(thread.engine(), core::device::open("tcp"));
    const auto least = context::min_task_timeout();
    EXPECT_GE(least, std::chrono::ceil<std::chrono::milliseconds>(core::coarse_resolution()));
    // The services set their control timeout (1 s and more) as the task timeout.
    EXPECT_LT(least, 100ms);
    try {
      ctx.set_task_timeout(1ms);
      ADD_FAILURE() << "a 1 ms task timeout was taken";
    } catch (const status_error& e) {
      EXPECT_EQ(e.code(), status::invalid_value);
      EXPECT_NE(std::string(e.what()).find("coarse clock"), std::string::npos) << e.what();
    }
    EXPECT_THROW(ctx.set_task_timeout(least - 1ms), status_error);
    EXPECT_NO_THROW(ctx.set_task_timeout(least));
    EXPECT_NO_THROW(ctx.set_task_timeout(1s));
  });
}

}  // namespace
}  // namespace zc::rdma::testing
