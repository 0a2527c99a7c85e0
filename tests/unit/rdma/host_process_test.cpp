// host_process (a process's identity in a connection blob) and process_watch (a pidfd on a
// same-host peer): the wire form, which peers may be watched (same boot, same pid namespace, not
// ourselves), and that a watched process's death is seen promptly, without parsing /proc in a loop.
#include "rdma/internal/host_process.hpp"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/bytes.hpp"
#include "support/subprocess.hpp"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace zc::rdma::internal {
namespace {

using namespace std::chrono_literals;

// Exit status a forked child uses for "this machine cannot run the test".
constexpr int cannot_run = 77;

std::vector<uint8_t> bytes_of(const host_process& p) {
  std::vector<uint8_t> out;
  byte_writer w(out);
  p.write(w);
  return out;
}

bool same(const host_process& a, const host_process& b) {
  return a.host_id == b.host_id && a.pid_ns == b.pid_ns && a.pid == b.pid &&
         a.start_time == b.start_time;
}

// Field 22 of /proc/self/stat, parsed independently of the code under test.
uint64_t own_start_time() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  std::getline(in, stat);
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) fields >> field;
  return std::stoull(field);
}

// Waits (poll, no spinning) until fd is readable; false after timeout.
bool readable_within(int fd, std::chrono::milliseconds timeout) {
  pollfd pfd{fd, POLLIN, 0};
  int n;
  do {
    n = poll(&pfd, 1, static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  return n > 0 && (pfd.revents & POLLIN) != 0;
}

// Reads exactly n bytes from fd, waiting at most timeout for each; fewer on EOF or timeout.
std::vector<uint8_t> read_bytes(int fd, size_t n, std::chrono::milliseconds timeout) {
  std::vector<uint8_t> out(n);
  size_t got = 0;
  while (got < n && readable_within(fd, timeout)) {
    ssize_t r = read(fd, out.data() + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  out.resize(got);
  return out;
}

// For forked children: writes all of `bytes` or exits.
void write_all(int fd, const std::vector<uint8_t>& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t r = write(fd, bytes.data() + done, bytes.size() - done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) _exit(90);
    done += static_cast<size_t>(r);
  }
}

// Exit status of a forked child, waiting at most timeout (then it is killed): nullopt if it had
// to be killed, 128 + signal if a signal ended it.
std::optional<int> wait_child(pid_t pid, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(5ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return std::nullopt;
}

// zc_rdma_host_process_peer: another process on this host that tells us its identity.
struct peer {
  peer() : proc({std::string(ZC_BINARY_DIR) + "/tests/zc_rdma_host_process_peer"}) {
    if (!proc.wait_for_output(" end", 20s)) return;
    auto out = proc.output();
    auto at = out.find("identity ") + 9;
    std::vector<uint8_t> bytes;
    for (size_t i = at; i + 1 < out.size() && out[i] != ' '; i += 2)
      bytes.push_back(static_cast<uint8_t>(std::stoi(out.substr(i, 2), nullptr, 16)));
    byte_reader r(bytes);
    ok = host_process::read(r, id) && r.remaining() == 0;
  }
  test::subprocess proc;
  host_process id;
  bool ok = false;
};

// --- host_process ---------------------------------------------------------------------------

TEST(host_process, self_describes_this_process) {
  auto me = host_process::self();
  EXPECT_EQ(me.pid, static_cast<uint32_t>(getpid()));
  EXPECT_NE(me.host_id, 0u);
  struct stat ns {};
  ASSERT_EQ(stat("/proc/self/ns/pid", &ns), 0);
  EXPECT_EQ(me.pid_ns, (uint64_t(ns.st_dev) << 32) ^ uint64_t(ns.st_ino));
  EXPECT_NE(me.pid_ns, 0u);
  EXPECT_EQ(me.start_time, own_start_time());
  EXPECT_NE(me.start_time, 0u);
  EXPECT_TRUE(same(host_process::self(), me));
}

TEST(host_process, self_round_trips_through_write_read) {
  auto me = host_process::self();
  auto bytes = bytes_of(me);
  ASSERT_EQ(bytes.size(), host_process::wire_size);
  bytes.push_back(0xAB);  // what follows in a blob is left to the caller
  byte_reader r(bytes);
  host_process back;
  ASSERT_TRUE(host_process::read(r, back));
  EXPECT_TRUE(same(back, me));
  EXPECT_EQ(r.remaining(), 1u);
  EXPECT_EQ(r.bytes(1)[0], 0xAB);
}

TEST(host_process, read_rejects_truncated_input) {
  auto bytes = bytes_of(host_process::self());
  for (size_t n = 0; n < bytes.size(); ++n) {
    byte_reader r(std::span<const uint8_t>(bytes.data(), n));
    host_process out;
    out.pid = 4242;
    EXPECT_FALSE(host_process::read(r, out)) << n << " bytes";
    EXPECT_EQ(out.pid, 4242u) << "a failed read must leave its output alone";
  }
}

TEST(host_process, read_rejects_an_identity_no_process_has) {
  for (auto forge :
       {+[](host_process& p) { p.pid = 0; }, +[](host_process& p) { p.host_id = 0; }}) {
    auto p = host_process::self();
    forge(p);
    auto bytes = bytes_of(p);
    byte_reader r(bytes);
    host_process out;
    EXPECT_FALSE(host_process::read(r, out));
  }
}

TEST(host_process, can_watch_another_process_in_this_pid_namespace) {
  auto me = host_process::self();
  auto other = me;
  other.pid = me.pid + 1;
  other.start_time = me.start_time + 7;
  EXPECT_TRUE(me.can_watch(other));
}

TEST(host_process, cannot_watch_a_process_in_another_pid_namespace) {
  // Two containers on one host: same boot id, but the pid means another process here.
  auto me = host_process::self();
  auto other = me;
  other.pid = me.pid + 1;
  other.pid_ns = me.pid_ns ^ 1;
  EXPECT_FALSE(me.can_watch(other));
}

TEST(host_process, cannot_watch_a_process_on_another_host) {
  auto me = host_process::self();
  auto other = me;
  other.pid = me.pid + 1;
  other.host_id = me.host_id ^ 2;
  EXPECT_FALSE(me.can_watch(other));
}

TEST(host_process, cannot_watch_itself) {
  auto me = host_process::self();
  EXPECT_FALSE(me.can_watch(me));
}

TEST(host_process, cannot_watch_an_identity_with_unknown_parts) {
  auto me = host_process::self();
  auto other = me;
  other.pid = me.pid + 1;
  auto no_start = other;
  no_start.start_time = 0;  // a recycled pid could not be told apart
  EXPECT_FALSE(me.can_watch(no_start));
  auto no_ns = other;
  no_ns.pid_ns = 0;
  auto me_no_ns = me;
  me_no_ns.pid_ns = 0;
  EXPECT_FALSE(me_no_ns.can_watch(no_ns));
  auto no_host = other;
  no_host.host_id = 0;
  auto me_no_host = me;
  me_no_host.host_id = 0;
  EXPECT_FALSE(me_no_host.can_watch(no_host));
}

TEST(host_process, a_child_in_a_new_pid_namespace_has_another_pid_ns) {
  int pipefd[2];
  ASSERT_EQ(pipe2(pipefd, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipefd[0]);
    // As root CLONE_NEWPID alone works; otherwise a user namespace may grant it.
    if (unshare(CLONE_NEWPID) != 0 && unshare(CLONE_NEWUSER | CLONE_NEWPID) != 0) _exit(cannot_run);
    pid_t inner = fork();  // the first child after unshare is pid 1 of the new namespace
    if (inner < 0) _exit(91);
    if (inner == 0) {
      write_all(pipefd[1], bytes_of(host_process::self()));
      _exit(0);
    }
    int st = 0;
    if (waitpid(inner, &st, 0) != inner || !WIFEXITED(st) || WEXITSTATUS(st) != 0) _exit(92);
    _exit(0);
  }
  close(pipefd[1]);
  auto bytes = read_bytes(pipefd[0], host_process::wire_size, 10s);
  close(pipefd[0]);
  auto status = wait_child(child, 10s);
  ASSERT_TRUE(status.has_value()) << "child hung";
  if (*status == cannot_run)
    GTEST_SKIP() << "unshare(CLONE_NEWPID) is refused here (needs root or unprivileged user "
                    "namespaces)";
  ASSERT_EQ(*status, 0);
  byte_reader r(bytes);
  host_process inner;
  ASSERT_TRUE(host_process::read(r, inner));
  auto me = host_process::self();
  EXPECT_EQ(inner.pid, 1u);
  EXPECT_EQ(inner.host_id, me.host_id);  // same boot: the boot id alone cannot tell them apart
  EXPECT_NE(inner.pid_ns, me.pid_ns);
  EXPECT_NE(inner.start_time, 0u);
  // Its pid 1 is not our pid 1: it must not be watched.
  EXPECT_FALSE(me.can_watch(inner));
  process_watch w;
  EXPECT_FALSE(w.open(inner));
  EXPECT_FALSE(w.watching());
}

// --- process_watch --------------------------------------------------------------------------

TEST(host_process_watch, sees_a_killed_child_exit_within_a_bounded_time) {
  peer p;
  ASSERT_TRUE(p.ok) << p.proc.output();
  EXPECT_TRUE(host_process::self().can_watch(p.id));
  process_watch w;
  ASSERT_TRUE(w.open(p.id));
  EXPECT_TRUE(w.watching());
  ASSERT_GE(w.fd(), 0) << "pidfd_open is available on this kernel";
  EXPECT_FALSE(w.exited());
  EXPECT_FALSE(readable_within(w.fd(), 100ms)) << "the peer is still running";
  EXPECT_FALSE(w.exited());

  auto killed = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(p.proc.pid(), SIGKILL), 0);
  ASSERT_TRUE(readable_within(w.fd(), 5s)) << "no exit seen within 5 s of SIGKILL";
  auto took = std::chrono::steady_clock::now() - killed;
  EXPECT_LT(took, 1s);
  // Not reaped yet: a zombie has exited.
  EXPECT_TRUE(w.exited());
  EXPECT_TRUE(w.watching());
}

TEST(host_process_watch, fd_wakes_epoll_when_the_process_exits) {
  peer p;
  ASSERT_TRUE(p.ok) << p.proc.output();
  process_watch w;
  ASSERT_TRUE(w.open(p.id));
  ASSERT_GE(w.fd(), 0);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  ASSERT_GE(ep, 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 42;
  ASSERT_EQ(epoll_ctl(ep, EPOLL_CTL_ADD, w.fd(), &ev), 0);
  epoll_event got{};
  EXPECT_EQ(epoll_wait(ep, &got, 1, 100), 0) << "the peer is still running";
  ASSERT_EQ(kill(p.proc.pid(), SIGKILL), 0);
  int n;
  do {
    n = epoll_wait(ep, &got, 1, 5000);
  } while (n < 0 && errno == EINTR);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(got.data.u64, 42u);
  EXPECT_NE(got.events & EPOLLIN, 0u);
  EXPECT_TRUE(w.exited());
  close(ep);
}

TEST(host_process_watch, refuses_a_pid_whose_start_time_does_not_match) {
  // The pid now belongs to another process than the one the blob describes (a recycled pid).
  peer p;
  ASSERT_TRUE(p.ok) << p.proc.output();
  for (uint64_t start : {p.id.start_time + 1, p.id.start_time - 1}) {
    auto recycled = p.id;
    recycled.start_time = start;
    process_watch w;
    EXPECT_FALSE(w.open(recycled));
    EXPECT_FALSE(w.watching());
    EXPECT_EQ(w.fd(), -1);
    EXPECT_FALSE(w.exited());
  }
  process_watch w;
  EXPECT_TRUE(w.open(p.id));
}

TEST(host_process_watch, refuses_a_process_that_has_exited) {
  peer p;
  ASSERT_TRUE(p.ok) << p.proc.output();
  process_watch first;
  ASSERT_TRUE(first.open(p.id));
  ASSERT_EQ(kill(p.proc.pid(), SIGKILL), 0);
  ASSERT_TRUE(readable_within(first.fd(), 5s));
  process_watch w;
  EXPECT_FALSE(w.open(p.id)) << "a zombie (exited, not reaped) is gone";
  ASSERT_TRUE(p.proc.wait(5s).has_value());  // reaped: the pid is free
  EXPECT_FALSE(w.open(p.id));
  EXPECT_FALSE(w.watching());
}

TEST(host_process_watch, refuses_what_it_cannot_watch) {
  peer p;
  ASSERT_TRUE(p.ok) << p.proc.output();
  process_watch w;
  EXPECT_FALSE(w.open(host_process::self()));
  auto other_ns = p.id;
  other_ns.pid_ns ^= 1;  // the same pid number, but in another container
  EXPECT_FALSE(w.open(other_ns));
  auto other_host = p.id;
  other_host.host_id ^= 2;
  EXPECT_FALSE(w.open(other_host));
  EXPECT_FALSE(w.watching());
  EXPECT_EQ(w.fd(), -1);
}

TEST(host_process_watch, moves_and_closes) {
  peer p;
  ASSERT_TRUE(p.ok) << p.proc.output();
  process_watch w;
  ASSERT_TRUE(w.open(p.id));
  int fd = w.fd();
  ASSERT_GE(fd, 0);
  process_watch moved(std::move(w));
  EXPECT_FALSE(w.watching());
  EXPECT_EQ(w.fd(), -1);
  EXPECT_FALSE(w.exited());
  EXPECT_TRUE(moved.watching());
  EXPECT_EQ(moved.fd(), fd);
  process_watch assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.fd(), fd);
  EXPECT_FALSE(moved.watching());
  // Opening again replaces the watch and closes the old pidfd.
  ASSERT_TRUE(assigned.open(p.id));
  int fd2 = assigned.fd();
  if (fd2 != fd) {
    EXPECT_EQ(fcntl(fd, F_GETFD), -1);
  }
  assigned.close();
  EXPECT_FALSE(assigned.watching());
  EXPECT_EQ(assigned.fd(), -1);
  EXPECT_FALSE(assigned.exited());
  errno = 0;
  EXPECT_EQ(fcntl(fd2, F_GETFD), -1);
  EXPECT_EQ(errno, EBADF);
}

// Without pidfd_open (a seccomp filter makes it ENOSYS, as on a pre-5.3 kernel), open() falls back
// to /proc: fd() is -1, and exited() (called on a timer) still sees the death.
TEST(host_process_watch, falls_back_to_proc_without_pidfd_open) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_pidfd_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
      _exit(cannot_run);
    errno = 0;
    if (syscall(SYS_pidfd_open, getpid(), 0) != -1 || errno != ENOSYS) _exit(20);
    int pipefd[2];
    if (pipe(pipefd) != 0) _exit(21);
    pid_t target = fork();
    if (target < 0) _exit(22);
    if (target == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      write_all(pipefd[1], bytes_of(host_process::self()));
      for (;;) pause();
    }
    auto bytes = read_bytes(pipefd[0], host_process::wire_size, 10s);
    byte_reader r(bytes);
    host_process id;
    if (!host_process::read(r, id)) _exit(23);
    auto recycled = id;
    recycled.start_time += 1;
    process_watch w;
    if (w.open(recycled)) _exit(24);
    if (!w.open(id)) _exit(25);
    if (!w.watching()) _exit(26);
    if (w.fd() != -1) _exit(27);
    if (w.exited()) _exit(28);
    kill(target, SIGKILL);
    for (int i = 0; i < 500 && !w.exited(); ++i) usleep(10'000);  // a timer, as the caller would
    if (!w.exited()) _exit(29);                                   // still a zombie here: not reaped
    waitpid(target, nullptr, 0);
    if (!w.exited()) _exit(30);
    _exit(0);
  }
  auto status = wait_child(child, 20s);
  ASSERT_TRUE(status.has_value()) << "child hung";
  if (*status == cannot_run) GTEST_SKIP() << "cannot install a seccomp filter here";
  // 20: filter not effective; 23: no identity from the target; 24: recycled pid watched;
  // 25-27: no /proc watch; 28: exited too early; 29-30: death not seen within 5 s.
  EXPECT_EQ(*status, 0);
}

}  // namespace
}  // namespace zc::rdma::internal
