// The supervisor of zcstore_local with real processes: /bin/sh scripts, /bin/sleep and the real
// zcstore_target_rdma. The cases where the supervisor itself is signalled or killed run it in a
// forked helper process. Every wait is bounded.
#include "supervisor.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "channel_name.hpp"
#include "core/thread.hpp"
#include "ports.hpp"
#include "support/subprocess.hpp"

namespace zc::local {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

constexpr auto line_timeout = 10s;
constexpr auto exit_timeout = 10s;
constexpr auto gone_timeout = 5s;
constexpr auto target_start_timeout = 20s;
// Slack for scheduling on a loaded 2-core machine, on top of a bound being checked.
constexpr auto slack = 3s;

std::vector<std::string> sh(const std::string& script, std::vector<std::string> args = {}) {
  std::vector<std::string> argv{"/bin/sh", "-c", script, "sh"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// Every line a supervisor emitted, as "[name] text" ("!" after the name for stderr).
struct collector {
  std::vector<std::string> lines;
  supervisor_options options(size_t max_line_bytes = 4096) {
    supervisor_options o;
    o.max_line_bytes = max_line_bytes;
    o.sink = [this](const output_line& l) {
      lines.push_back("[" + std::string(l.child) + "]" +
                      (l.stream == output_stream::err ? "!" : "") + " " + std::string(l.text));
    };
    return o;
  }
  ptrdiff_t index(const std::string& line) const {
    auto it = std::find(lines.begin(), lines.end(), line);
    return it == lines.end() ? -1 : it - lines.begin();
  }
  std::string dump() const {
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

// Output dropped: for cases that check no line.
supervisor_options quiet() {
  supervisor_options o;
  o.sink = [](const output_line&) {};
  return o;
}

// Running, as opposed to gone or a zombie that nobody reaps (an orphan's zombie stays until init
// reaps it, and this container's init may never do so).
bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

bool gone_within(pid_t pid, std::chrono::milliseconds bound) {
  const auto deadline = clock::now() + bound;
  while (alive(pid)) {
    if (clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

class temp_dir {
 public:
  temp_dir() {
    std::string templ = (fs::temp_directory_path() / "zc-local-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void touch(const std::string& path) {
  std::ofstream(path).put('\n');
}

// A helper process that runs `body` (which must not return into GoogleTest) and reports pids to
// the test through a pipe.
class helper_process {
 public:
  template <class F>
  explicit helper_process(F body) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(p[0]);
      int code = 1;
      try {
        code = body(p[1]);
      } catch (...) {
        code = 99;
      }
      _exit(code);
    }
    ::close(p[1]);
    read_fd_ = p[0];
  }
  ~helper_process() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      wait(5s);
    }
    ::close(read_fd_);
  }
  pid_t pid() const { return pid_; }
  // The next pid the helper wrote, or 0 if none came within the bound.
  pid_t read_pid(std::chrono::milliseconds bound) {
    pollfd fd{read_fd_, POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(bound.count())) != 1) return 0;
    pid_t pid = 0;
    return ::read(read_fd_, &pid, sizeof(pid)) == sizeof(pid) ? pid : 0;
  }
  // Exit status (128 + signal if killed), or nullopt if still running at the bound.
  std::optional<int> wait(std::chrono::milliseconds bound) {
    const auto deadline = clock::now() + bound;
    while (!status_) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(10ms);
    }
    return status_;
  }

  static void write_pid(int fd, pid_t pid) {
    if (::write(fd, &pid, sizeof(pid)) != sizeof(pid)) _exit(98);
  }

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
  std::optional<int> status_;
};

// ---- output

TEST(supervisor, output_is_prefixed_and_interleaves_by_line) {
  temp_dir dir;
  collector out;
  supervisor sup(out.options());
  // Each waits for a file from the test, so the order of their lines is known.
  const std::string script =
      "printf 'start 1\\nstart 2\\n'; while [ ! -e \"$1\" ]; do sleep 0.01; done; echo end";
  auto a = sup.start({"a", sh(script, {dir / "a-go"})});
  auto b = sup.start({"b", sh(script, {dir / "b-go"})});
  ASSERT_TRUE(sup.wait_for_line(a, "start 2", line_timeout)) << out.dump();
  ASSERT_TRUE(sup.wait_for_line(b, "start 2", line_timeout)) << out.dump();
  touch(dir / "a-go");
  ASSERT_EQ(sup.wait_exit(a, exit_timeout), exit_status{}) << out.dump();
  touch(dir / "b-go");
  ASSERT_EQ(sup.wait_exit(b, exit_timeout), exit_status{}) << out.dump();
  sup.stop_all(1s);

  ASSERT_EQ(out.lines.size(), 6u) << out.dump();
  for (const auto& line : {"[a] start 1", "[a] start 2", "[b] start 1", "[b] start 2"})
    EXPECT_GE(out.index(line), 0) << line << "\n" << out.dump();
  // b's lines come between a's: whole lines from both, in the order they were written.
  EXPECT_LT(out.index("[a] start 1"), out.index("[a] start 2"));
  EXPECT_LT(out.index("[b] start 2"), out.index("[a] end")) << out.dump();
  EXPECT_LT(out.index("[a] end"), out.index("[b] end")) << out.dump();
}

TEST(supervisor, stderr_lines_keep_their_stream) {
  collector out;
  supervisor sup(out.options());
  auto c = sup.start({"c", sh("echo to-out; echo to-err >&2")});
  ASSERT_EQ(sup.wait_exit(c, exit_timeout), exit_status{});
  sup.stop_all(1s);
  EXPECT_GE(out.index("[c] to-out"), 0) << out.dump();
  EXPECT_GE(out.index("[c]! to-err"), 0) << out.dump();
}

TEST(supervisor, partial_last_line_is_flushed_at_exit) {
  collector out;
  supervisor sup(out.options());
  auto c = sup.start({"c", sh("echo whole; printf 'no newline'")});
  ASSERT_EQ(sup.wait_exit(c, exit_timeout), exit_status{});
  // The exit may be seen before the end of the output: waiting for the line reads on to it.
  EXPECT_EQ(sup.wait_for_line(c, "no newline", line_timeout), "no newline") << out.dump();
  EXPECT_EQ(out.lines, (std::vector<std::string>{"[c] whole", "[c] no newline"}));
}

TEST(supervisor, partial_last_line_is_flushed_when_stopped) {
  collector out;
  supervisor sup(out.options());
  auto c = sup.start({"c", sh("printf 'ready\\nhalf a line'; exec sleep 100")});
  // One printf, one write: once "ready" is here, so is the half line.
  ASSERT_TRUE(sup.wait_for_line(c, "ready", line_timeout));
  sup.stop_all(3s);
  EXPECT_EQ(out.lines, (std::vector<std::string>{"[c] ready", "[c] half a line"}));
}

TEST(supervisor, long_lines_are_split_at_the_bound) {
  collector out;
  supervisor sup(out.options(16));
  const std::string x40(40, 'x'), y16(16, 'y');
  auto c = sup.start({"c", sh("printf '%s\\n%s\\nz\\n' \"$1\" \"$2\"", {x40, y16})});
  ASSERT_EQ(sup.wait_exit(c, exit_timeout), exit_status{});
  sup.stop_all(1s);
  // A line of exactly the bound stays one line: its newline adds no empty line.
  EXPECT_EQ(out.lines,
            (std::vector<std::string>{"[c] " + std::string(16, 'x'), "[c] " + std::string(16, 'x'),
                                      "[c] " + std::string(8, 'x'), "[c] " + y16, "[c] z"}));
}

TEST(supervisor, line_writer_writes_prefixed_lines) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  {
    supervisor_options o;
    o.sink = line_writer(p[1], p[1]);
    supervisor sup(o);
    auto c = sup.start({"writer", sh("echo hello; echo oops >&2; printf end")});
    ASSERT_EQ(sup.wait_exit(c, exit_timeout), exit_status{});
    sup.stop_all(1s);
  }
  ::close(p[1]);
  std::string text;
  char buffer[256];
  for (ssize_t n; (n = ::read(p[0], buffer, sizeof(buffer))) > 0;) text.append(buffer, n);
  ::close(p[0]);
  EXPECT_NE(text.find("[writer] hello\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[writer] oops\n"), std::string::npos) << text;
  EXPECT_NE(text.find("[writer] end\n"), std::string::npos) << text;
}

// ---- start, status and waits

TEST(supervisor, exit_code_is_reported) {
  supervisor sup(quiet());
  auto c = sup.start({"c", sh("exit 3")});
  auto status = sup.wait_exit(c, exit_timeout);
  ASSERT_TRUE(status);
  EXPECT_FALSE(status->signaled);
  EXPECT_EQ(status->code, 3);
  EXPECT_EQ(status->shell_code(), 3);
  EXPECT_EQ(sup.status(c), status);
  EXPECT_FALSE(sup.running(c));
}

TEST(supervisor, a_child_killed_by_a_signal_reports_the_signal) {
  supervisor sup(quiet());
  auto c = sup.start({"c", {"/bin/sleep", "100"}});
  ASSERT_EQ(::kill(sup.pid(c), SIGUSR1), 0);
  auto status = sup.wait_exit(c, exit_timeout);
  ASSERT_TRUE(status);
  EXPECT_TRUE(status->signaled);
  EXPECT_EQ(status->signal, SIGUSR1);
  EXPECT_EQ(status->shell_code(), 128 + SIGUSR1);
  EXPECT_NE(status->describe().find("signal " + std::to_string(SIGUSR1)), std::string::npos);
}

TEST(supervisor, extra_env_reaches_the_child_and_path_is_searched) {
  collector out;
  supervisor sup(out.options());
  auto c = sup.start(
      {"c", {"sh", "-c", "echo \"v=$ZC_SUPERVISOR_TEST\""}, {{"ZC_SUPERVISOR_TEST", "hello"}}});
  EXPECT_EQ(sup.wait_for_line(c, "v=", line_timeout), "v=hello") << out.dump();
}

TEST(supervisor, a_program_that_cannot_start_is_reported) {
  supervisor sup(quiet());
  try {
    sup.start({"missing", {"/nonexistent/zcstore_program"}});
    FAIL() << "start did not throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos) << e.what();
  }
  EXPECT_EQ(sup.size(), 0u);
}

TEST(supervisor, children_share_one_process_group_apart_from_the_supervisor) {
  supervisor sup(quiet());
  auto a = sup.start({"a", {"/bin/sleep", "100"}});
  auto b = sup.start({"b", {"/bin/sleep", "100"}});
  ASSERT_NE(sup.process_group(), 0);
  EXPECT_NE(sup.process_group(), getpgrp());
  EXPECT_EQ(getpgid(sup.pid(a)), sup.process_group());
  EXPECT_EQ(getpgid(sup.pid(b)), sup.process_group());
}

TEST(supervisor, waits_end_at_their_bound) {
  collector out;
  supervisor sup(out.options());
  auto c = sup.start({"c", {"/bin/sleep", "100"}});
  auto t0 = clock::now();
  EXPECT_FALSE(sup.wait_exit(c, 300ms));
  EXPECT_FALSE(sup.wait_for_line(c, "never printed", 300ms));
  auto elapsed = clock::now() - t0;
  EXPECT_GE(elapsed, 550ms);
  EXPECT_LT(elapsed, 600ms + slack);
  EXPECT_TRUE(sup.running(c));
}

TEST(supervisor, waiting_for_a_line_ends_when_the_output_does) {
  supervisor sup(quiet());
  auto c = sup.start({"c", sh("echo something else")});
  auto t0 = clock::now();
  EXPECT_FALSE(sup.wait_for_line(c, "never printed", 60s));
  EXPECT_LT(clock::now() - t0, slack);
}

TEST(supervisor, wait_any_exit_reports_each_ended_child_once) {
  temp_dir dir;
  supervisor sup(quiet());
  auto slow = sup.start({"slow", sh("while [ ! -e \"$1\" ]; do sleep 0.01; done", {dir / "go"})});
  auto fast = sup.start({"fast", sh("exit 0")});
  EXPECT_EQ(sup.wait_any_exit(exit_timeout), fast);
  EXPECT_FALSE(sup.wait_any_exit(200ms));
  touch(dir / "go");
  EXPECT_EQ(sup.wait_any_exit(exit_timeout), slow);
  EXPECT_FALSE(sup.wait_any_exit(exit_timeout));  // nothing left running: at once
}

// ---- stopping

TEST(supervisor, stop_all_ends_a_cooperative_child_with_sigterm) {
  supervisor sup(quiet());
  auto c = sup.start({"c", {"/bin/sleep", "100"}});
  auto t0 = clock::now();
  sup.stop_all(10s);
  EXPECT_LT(clock::now() - t0, slack);
  ASSERT_TRUE(sup.status(c));
  EXPECT_EQ(sup.status(c)->signal, SIGTERM) << sup.status(c)->describe();
}

TEST(supervisor, stop_all_kills_a_child_ignoring_sigterm_after_the_grace) {
  collector out;
  supervisor sup(out.options());
  auto c = sup.start({"c", sh("trap '' TERM; echo ready; exec sleep 100")});
  ASSERT_TRUE(sup.wait_for_line(c, "ready", line_timeout)) << out.dump();
  constexpr auto grace = 500ms;
  auto t0 = clock::now();
  sup.stop_all(grace);
  auto elapsed = clock::now() - t0;
  EXPECT_GE(elapsed, grace - 50ms);
  EXPECT_LT(elapsed, grace + slack);
  ASSERT_TRUE(sup.status(c));
  EXPECT_EQ(sup.status(c)->signal, SIGKILL) << sup.status(c)->describe();
  EXPECT_FALSE(alive(sup.pid(c)));
}

pid_t grandchild_pid(supervisor& sup, supervisor::child_id id) {
  auto line = sup.wait_for_line(id, "grandchild ", line_timeout);
  return line ? static_cast<pid_t>(std::stol(line->substr(11))) : 0;
}

TEST(supervisor, grandchildren_are_gone_after_stop_all) {
  supervisor sup(quiet());
  auto c = sup.start({"c", sh("sleep 100 & echo grandchild $!; wait")});
  const pid_t grandchild = grandchild_pid(sup, c);
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(alive(grandchild));
  sup.stop_all(3s);
  EXPECT_TRUE(gone_within(grandchild, gone_timeout));
  EXPECT_FALSE(sup.running(c));
}

TEST(supervisor, grandchildren_ignoring_sigterm_are_killed_after_the_grace) {
  collector out;
  supervisor sup(out.options());
  auto c = sup.start(
      {"c",
       sh("(trap '' TERM; exec sleep 100) & echo grandchild $!; sleep 0.2; echo ready; wait")});
  const pid_t grandchild = grandchild_pid(sup, c);
  ASSERT_GT(grandchild, 0);
  ASSERT_TRUE(sup.wait_for_line(c, "ready", line_timeout)) << out.dump();  // trap is set
  constexpr auto grace = 500ms;
  auto t0 = clock::now();
  sup.stop_all(grace);
  EXPECT_GE(clock::now() - t0, grace - 50ms);
  EXPECT_TRUE(gone_within(grandchild, gone_timeout));
}

TEST(supervisor, the_destructor_stops_every_child) {
  pid_t pid = 0;
  {
    supervisor sup(quiet());
    pid = sup.pid(sup.start({"c", {"/bin/sleep", "100"}}));
    ASSERT_TRUE(alive(pid));
  }
  EXPECT_FALSE(alive(pid));
}

// PR_SET_PDEATHSIG: a supervisor killed with SIGKILL can do nothing, its children still end.
TEST(supervisor, children_end_when_the_supervisor_is_killed) {
  helper_process helper([](int fd) {
    supervisor sup(quiet());
    helper_process::write_pid(fd, sup.pid(sup.start({"a", {"/bin/sleep", "100"}})));
    helper_process::write_pid(fd, sup.pid(sup.start({"b", sh("exec sleep 100")})));
    for (;;) pause();
    return 0;
  });
  const pid_t a = helper.read_pid(10s), b = helper.read_pid(10s);
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  ASSERT_TRUE(alive(a));
  ASSERT_TRUE(alive(b));
  ASSERT_EQ(::kill(helper.pid(), SIGKILL), 0);
  ASSERT_EQ(helper.wait(5s), 128 + SIGKILL);
  EXPECT_TRUE(gone_within(a, gone_timeout));
  EXPECT_TRUE(gone_within(b, gone_timeout));
}

// What zcstore_local does on Ctrl-C or SIGTERM: its wait wakes at once (the stop eventfd), then
// it stops every child.
TEST(supervisor, sigterm_to_the_supervisor_wakes_its_wait_and_it_stops_the_children) {
  helper_process helper([](int fd) {
    core::install_stop_signal_handlers();
    supervisor sup(quiet());
    auto c = sup.start({"c", {"/bin/sleep", "100"}});
    helper_process::write_pid(fd, sup.pid(c));
    if (sup.wait_exit(c, 60s)) return 3;  // the child cannot have ended
    if (!core::stop_requested()) return 4;
    sup.stop_all(3s);
    return sup.running(c) ? 5 : 0;
  });
  const pid_t child = helper.read_pid(10s);
  ASSERT_GT(child, 0);
  auto t0 = clock::now();
  ASSERT_EQ(::kill(helper.pid(), SIGTERM), 0);
  EXPECT_EQ(helper.wait(slack), 0);
  EXPECT_LT(clock::now() - t0, slack);
  EXPECT_TRUE(gone_within(child, gone_timeout));
}

// The orderly stop after a Ctrl-C: one child gets the signal alone, and the supervisor waits
// for it although a stop has been requested.
TEST(supervisor, after_a_stop_one_child_can_be_signalled_and_waited_for) {
  helper_process helper([](int fd) {
    core::install_stop_signal_handlers();
    supervisor sup(quiet());
    auto first = sup.start({"first", {"/bin/sleep", "100"}});
    auto second = sup.start({"second", {"/bin/sleep", "100"}});
    helper_process::write_pid(fd, sup.pid(first));
    helper_process::write_pid(fd, sup.pid(second));
    core::request_stop();
    if (sup.wait_exit(second, 5s)) return 3;  // a plain wait ends at the stop request
    if (!sup.signal(second, SIGTERM)) return 4;
    auto status = sup.wait_exit_while_stopping(second, 10s);
    if (!status || !status->signaled || status->signal != SIGTERM) return 5;
    if (sup.signal(second, SIGTERM)) return 6;                 // it has ended: nothing to signal
    if (!sup.running(first)) return 7;                         // the group was not signalled
    if (sup.wait_exit_while_stopping(first, 100ms)) return 8;  // bounded
    sup.stop_all(3s);
    return sup.running(first) ? 9 : 0;
  });
  const pid_t first = helper.read_pid(10s), second = helper.read_pid(10s);
  ASSERT_GT(first, 0);
  ASSERT_GT(second, 0);
  EXPECT_EQ(helper.wait(30s), 0);
  EXPECT_TRUE(gone_within(first, gone_timeout));
  EXPECT_TRUE(gone_within(second, gone_timeout));
}

// ---- the real target

TEST(supervisor, target_on_port_0_reports_its_port_and_stops_cleanly) {
  collector out;
  supervisor sup(out.options());
  auto t = sup.start({"target",
                      {test::binary("zcstore_target_rdma"), "--listen-port", "0", "--cpu", "0",
                       "-d", "tcp", "--poll-mode", "event"},
                      {{"UCX_WARN_UNUSED_ENV_VARS", "n"}}});
  auto line = sup.wait_for_line(t, listening_line_text, target_start_timeout);
  ASSERT_TRUE(line) << out.dump();
  auto port = parse_listening_port(*line);
  ASSERT_TRUE(port) << *line;
  // The port is the target's: a connection is accepted there.
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(*port);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
  // SIGTERM is the target's stop request: it prints its per-core stats and exits 0.
  sup.stop_all(10s);
  EXPECT_EQ(sup.status(t), exit_status{}) << sup.status(t)->describe() << "\n" << out.dump();
  EXPECT_TRUE(sup.wait_for_line(t, "Core: 0", 0ms)) << out.dump();
}

// ---- ports and names

TEST(supervisor_helpers, parse_listening_port_reads_the_targets_line) {
  EXPECT_EQ(parse_listening_port("[12:00:00.000][42][zcstore][info] listening on port 4791"),
            std::optional<uint16_t>(4791));
  EXPECT_EQ(parse_listening_port("listening on port 65535\n"), std::optional<uint16_t>(65535));
  EXPECT_EQ(parse_listening_port("listening on port 0"), std::nullopt);
  EXPECT_EQ(parse_listening_port("listening on port 65536"), std::nullopt);
  EXPECT_EQ(parse_listening_port("listening on port 123456"), std::nullopt);
  EXPECT_EQ(parse_listening_port("listening on port 12ab"), std::nullopt);
  EXPECT_EQ(parse_listening_port("listening on port "), std::nullopt);
  EXPECT_EQ(parse_listening_port("comch server listening on @x"), std::nullopt);
}

TEST(supervisor_helpers, free_tcp_port_can_be_bound) {
  const uint16_t port = free_tcp_port();
  ASSERT_NE(port, 0);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
}

TEST(supervisor_helpers, unique_channel_names_differ_and_keep_the_prefix) {
  std::set<std::string> names;
  const std::string start = "zc_local-" + std::to_string(getpid()) + "-";
  for (int i = 0; i < 1000; ++i) {
    auto name = unique_channel_name("zc_local");
    EXPECT_EQ(name.rfind(start, 0), 0u) << name;
    names.insert(name);
  }
  EXPECT_EQ(names.size(), 1000u);
}

}  // namespace
}  // namespace zc::local
