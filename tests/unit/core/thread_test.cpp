// Thread pinning (--cpu) and the stop signals. The signal tests change process-wide state, so they
// run in a forked child and report through its exit status.
#include "core/thread.hpp"

#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <thread>

#include "support/child_io.hpp"

namespace zc::core {
namespace {

using namespace std::chrono_literals;

constexpr auto child_timeout = 10s;

std::optional<int> reap(pid_t pid) {
  return zc::test::reap(pid, child_timeout);
}

// Runs `body` in a child; its return value is the child's exit code.
template <typename Body>
std::optional<int> in_child(Body&& body) {
  pid_t child = fork();
  if (child < 0) return std::nullopt;
  if (child == 0) _exit(body());
  return reap(child);
}

bool readable_now(int fd) {
  pollfd p{fd, POLLIN, 0};
  return fd >= 0 && poll(&p, 1, 0) == 1;
}

TEST(thread, pins_to_an_allowed_cpu) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int cpu = 0;
  while (!CPU_ISSET(cpu, &allowed)) ++cpu;
  bool pinned = false;
  // On a thread of its own, so that the test runner's affinity is untouched.
  std::thread t([&] {
    pin_current_thread(static_cast<uint32_t>(cpu));
    pinned = sched_getcpu() == cpu;
  });
  t.join();
  EXPECT_TRUE(pinned);
}

TEST(thread, pinning_to_a_cpu_that_does_not_exist_throws) {
  status code = status::success;
  std::thread t([&] {
    try {
      pin_current_thread(CPU_SETSIZE - 1);
    } catch (const status_error& e) {
      code = e.code();
    }
  });
  t.join();
  EXPECT_NE(code, status::success);
}

TEST(thread, request_stop_sets_the_flag_and_the_fd) {
  auto st = in_child([] {
    install_stop_signal_handlers();
    if (stop_requested()) return 1;
    if (readable_now(stop_signal_fd())) return 2;
    request_stop();
    if (!stop_requested()) return 3;
    return readable_now(stop_signal_fd()) ? 0 : 4;
  });
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFEXITED(*st)) << *st;
  EXPECT_EQ(WEXITSTATUS(*st), 0);
}

TEST(thread, first_sigterm_requests_a_stop_and_the_second_kills) {
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  auto st = in_child([&] {
    close(report[0]);
    install_stop_signal_handlers();
    raise(SIGTERM);
    if (!stop_requested() || !readable_now(stop_signal_fd())) return 1;
    const char survived = 'S';
    if (write(report[1], &survived, 1) != 1) return 2;
    raise(SIGINT);
    return 3;  // still alive after the second signal
  });
  close(report[1]);
  char survived = 0;
  const bool first_survived = read(report[0], &survived, 1) == 1 && survived == 'S';
  close(report[0]);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(first_survived) << "the first SIGTERM did not just request a stop";
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGINT) << "wait status " << *st;
}

}  // namespace
}  // namespace zc::core
