#include "core/thread.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>

namespace zc::core {
namespace {
std::atomic<bool> stop_flag{false};
int stop_fd = -1;

void on_signal(int signo) {
  if (stop_flag.exchange(true)) {
    signal(signo, SIG_DFL);
    raise(signo);
    return;
  }
  uint64_t one = 1;
  if (stop_fd >= 0) [[maybe_unused]]
    ssize_t r = write(stop_fd, &one, sizeof(one));
}
}  // namespace

void pin_current_thread(uint32_t cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
    throw status_error(status::invalid_value, fmt::format("cannot pin thread to cpu {}", cpu));
  cpu_set_t actual;
  CPU_ZERO(&actual);
  if (pthread_getaffinity_np(pthread_self(), sizeof(actual), &actual) != 0 ||
      !CPU_ISSET(cpu, &actual) || CPU_COUNT(&actual) != 1)
    throw status_error(status::bad_state, fmt::format("thread did not stay on cpu {}", cpu));
}

void install_stop_signal_handlers() {
  if (stop_fd < 0) stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() noexcept {
  return stop_flag.load(std::memory_order_relaxed);
}
int stop_signal_fd() noexcept {
  return stop_fd;
}

bool sleep_unless_stopped(std::chrono::steady_clock::time_point deadline) noexcept {
  const auto left = deadline - std::chrono::steady_clock::now();
  if (left > std::chrono::steady_clock::duration::zero() && !stop_flag.load()) {
    pollfd stop{stop_fd, POLLIN, 0};
    // Rounded up: a sub-millisecond remainder rounded down to 0 would spin.
    const int ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
    (void)::poll(&stop, stop.fd >= 0 ? 1 : 0, ms);
  }
  return !stop_flag.load();
}

void request_stop() noexcept {
  stop_flag.store(true);
  uint64_t one = 1;
  if (stop_fd >= 0) [[maybe_unused]]
    ssize_t r = write(stop_fd, &one, sizeof(one));
}

}  // namespace zc::core
