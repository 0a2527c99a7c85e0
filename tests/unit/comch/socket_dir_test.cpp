// Where comch sockets live: the private socket directory (refused unless it is a real directory
// of ours that nobody else can enter), socket files claimed and given back by servers, and a
// second local user who can neither take a channel's name first nor reach a channel.
// Every test names its own directory in ZC_COMCH_DIR, but the one that checks the defaults.
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "comch/address.hpp"
#include "comch/internal/socket_dir.hpp"
#include "comch/internal/unix_socket.hpp"
#include "comch_test_support.hpp"

namespace zc::comch::test {
namespace {

using internal::socket_dir_variable;

// The uid and gid of "nobody" on Debian, the second user of the cross-user tests.
constexpr uid_t other_uid = 65534;
constexpr gid_t other_gid = 65534;

// The status_error that `f` throws; fails the test when it throws none.
template <typename F>
std::optional<status_error> error_of(F&& f) {
  try {
    f();
  } catch (const status_error& e) {
    return e;
  }
  ADD_FAILURE() << "no status_error thrown";
  return std::nullopt;
}

void expect_refused(const std::string& path, const std::string& reason) {
  auto e = error_of([] { internal::socket_directory(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), status::not_permitted) << e->what();
  EXPECT_NE(std::string(e->what()).find(path), std::string::npos) << e->what();
  EXPECT_NE(std::string(e->what()).find(reason), std::string::npos) << e->what();
  // Both ends refuse it when they start, and stay idle.
  core::progress_engine engine(core::poll_mode::event);
  server srv(engine, {.name = channel_name()});
  client cli(engine, {.name = channel_name()});
  auto at_server = error_of([&] { srv.start(); });
  auto at_client = error_of([&] { cli.start(); });
  ASSERT_TRUE(at_server && at_client);
  EXPECT_EQ(at_server->code(), status::not_permitted);
  EXPECT_EQ(at_client->code(), status::not_permitted);
  EXPECT_EQ(srv.state(), context_state::idle);
  EXPECT_EQ(cli.state(), context_state::idle);
}

bool is_socket(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

TEST(comch_socket_dir, a_missing_directory_is_created_private_and_channels_meet_there) {
  private_socket_dir dir;
  EXPECT_EQ(internal::socket_directory(), dir.dir.path);
  struct stat st;
  ASSERT_EQ(lstat(dir.dir.path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  core::progress_engine engine(core::poll_mode::event);
  std::string path;
  {
    const std::string name = channel_name();
    server srv(engine, {.name = name});
    client cli(engine, {.name = name});
    ASSERT_EQ(srv.start(), status::success);
    path = srv.socket_path();
    EXPECT_EQ(path, socket_path(dir.dir.path, "auto", name));
    EXPECT_TRUE(is_socket(path));
    ASSERT_EQ(cli.start(), status::success);
    ASSERT_TRUE(engine.run_until(
        [&] { return cli.state() == context_state::running && srv.connection_count() == 1; },
        wait_limit));
    cli.stop();
    srv.stop();
    ASSERT_TRUE(engine.run_until([&] { return cli.state() == context_state::idle; }, wait_limit));
    EXPECT_TRUE(is_socket(path)) << "a stopped server keeps its socket file until destroyed";
  }
  EXPECT_FALSE(std::filesystem::exists(path)) << "a destroyed server left its socket file";
}

TEST(comch_socket_dir, a_directory_others_can_enter_is_refused) {
  private_socket_dir dir;
  ASSERT_EQ(mkdir(dir.dir.path.c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir.dir.path.c_str(), 0755), 0);  // not left to the umask
  expect_refused(dir.dir.path, "has mode 0755");
}

TEST(comch_socket_dir, a_symlink_in_place_of_the_directory_is_refused) {
  scratch_path target;
  private_socket_dir dir;
  ASSERT_EQ(mkdir(target.path.c_str(), 0700), 0);  // a good directory, behind a link
  ASSERT_EQ(symlink(target.path.c_str(), dir.dir.path.c_str()), 0);
  expect_refused(dir.dir.path, "is a symlink");
}

TEST(comch_socket_dir, a_file_in_place_of_the_directory_is_refused) {
  private_socket_dir dir;
  std::ofstream(dir.dir.path) << "not a directory\n";
  expect_refused(dir.dir.path, "is not a directory");
}

TEST(comch_socket_dir, a_directory_of_another_user_is_refused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to uid " << other_uid;
  private_socket_dir dir;
  ASSERT_EQ(mkdir(dir.dir.path.c_str(), 0700), 0);
  ASSERT_EQ(chown(dir.dir.path.c_str(), other_uid, other_gid), 0);
  expect_refused(dir.dir.path, "is owned by uid " + std::to_string(other_uid));
}

TEST(comch_socket_dir, a_relative_override_is_refused) {
  scoped_env env(socket_dir_variable, "relative/dir");
  auto e = error_of([] { internal::socket_directory(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), status::bad_config) << e->what();
}

TEST(comch_socket_dir, the_runtime_directory_is_used_only_when_it_is_ours) {
  scoped_env no_override(socket_dir_variable, std::nullopt);
  scratch_path runtime;
  ASSERT_EQ(mkdir(runtime.path.c_str(), 0700), 0);
  {
    scoped_env xdg("XDG_RUNTIME_DIR", runtime.path);
    EXPECT_EQ(internal::socket_directory(), runtime.path + "/zcstore-comch");
  }
  const std::string fallback = "/tmp/zcstore-comch-" + std::to_string(geteuid());
  {
    scoped_env xdg("XDG_RUNTIME_DIR", "relative/run");
    EXPECT_EQ(internal::socket_directory(), fallback);
  }
  if (geteuid() == 0) {
    ASSERT_EQ(chown(runtime.path.c_str(), other_uid, other_gid), 0);
    scoped_env xdg("XDG_RUNTIME_DIR", runtime.path);
    EXPECT_EQ(internal::socket_directory(), fallback);
  }
}

TEST(comch_socket_dir, a_stale_socket_file_is_replaced_and_a_live_one_kept) {
  private_socket_dir dir;
  core::progress_engine engine(core::poll_mode::event);
  const std::string name = channel_name();
  auto first = std::make_unique<server>(engine, server_config{.name = name});
  server second(engine, {.name = name});
  ASSERT_EQ(first->start(), status::success);
  // Live: the second server is refused and the first one's file stays.
  auto e = error_of([&] { second.start(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), status::in_use);
  EXPECT_NE(std::string(e->what()).find("is already served"), std::string::npos) << e->what();
  EXPECT_TRUE(is_socket(first->socket_path()));
  // Stopped: its file is stale, and the second server takes the name.
  first->stop();
  ASSERT_EQ(second.start(), status::success);
  // Destroying the first server leaves the second one's file alone.
  first.reset();
  ASSERT_TRUE(is_socket(second.socket_path()));
  client cli(engine, {.name = name});
  ASSERT_EQ(cli.start(), status::success);
  ASSERT_TRUE(engine.run_until(
      [&] { return cli.state() == context_state::running && second.connection_count() == 1; },
      wait_limit));
  cli.stop();
  second.stop();
  EXPECT_TRUE(engine.run_until([&] { return cli.state() == context_state::idle; }, wait_limit));
}

TEST(comch_socket_dir, a_file_in_the_way_is_not_taken_for_a_socket) {
  private_socket_dir dir;
  const std::string name = channel_name();
  std::ofstream(socket_path(internal::socket_directory(), "auto", name)) << "mine\n";
  core::progress_engine engine(core::poll_mode::event);
  server srv(engine, {.name = name});
  auto e = error_of([&] { srv.start(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), status::already_exist) << e->what();
  EXPECT_FALSE(is_socket(socket_path(dir.dir.path, "auto", name)));
}

// --- a second local user -----------------------------------------------------------------------

// One line from `fd` (without its newline), waiting at most `bound` in all; nullopt on timeout
// or end of stream.
std::optional<std::string> read_line(int fd, std::chrono::milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  std::string line;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) != 1) return std::nullopt;
    char c;
    if (read(fd, &c, 1) != 1) return std::nullopt;
    if (c == '\n') return line;
    line.push_back(c);
  }
}

// A forked child, killed and reaped at the end of the scope whatever happened.
class child_process {
 public:
  explicit child_process(pid_t pid) : pid_(pid) {}
  ~child_process() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);  // bounded: SIGKILL cannot be ignored
    }
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  // The exit status once the child has closed `its_pipe` (it does so by exiting) within `bound`,
  // else -1 (and the child is killed and reaped).
  int exit_status(int its_pipe, std::chrono::milliseconds bound) {
    pollfd p{its_pipe, POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) != 1) break;
      char c;
      if (read(its_pipe, &c, 1) <= 0) break;  // end of stream: the child is exiting
    }
    int st = 0;
    kill(pid_, SIGKILL);  // a no-op for a child that has exited already
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }

 private:
  pid_t pid_;
};

// What the second user sees, as one word per attempt: "refused:<status name>" for a status_error,
// "errno:<name>" for a failed socket call, "ok" when it worked.
std::string attempt(const std::function<void()>& f) {
  try {
    f();
    return "ok";
  } catch (const status_error& e) {
    return "refused:" + std::string(status_name(e.code()));
  } catch (const std::exception& e) {
    return std::string("exception:") + e.what();
  }
}
std::string socket_result(int fd) {
  if (fd >= 0) {
    internal::close_fd(fd);
    return "ok";
  }
  return errno == EACCES ? "errno:EACCES" : "errno:" + std::to_string(errno);
}

void say(int fd, const std::string& line) {
  const std::string text = line + "\n";
  if (write(fd, text.data(), text.size()) != ssize_t(text.size())) _exit(3);
}

// The second user's side, in a forked child: become uid/gid 65534, then (1) try to take root's
// channel in root's directory, through a server and by hand, and serve the same channel name
// from a directory of its own; report; wait for root's server; (2) try to dial root's channel,
// through a client and by hand; report; exit. Never returns.
[[noreturn]] void run_second_user(int report, int go, const std::string& root_dir,
                                  const std::string& own_dir, const std::string& name) {
  if (setgroups(0, nullptr) != 0 || setresgid(other_gid, other_gid, other_gid) != 0 ||
      setresuid(other_uid, other_uid, other_uid) != 0) {
    say(report, "cannot become uid 65534");
    _exit(2);
  }
  const std::string root_path = socket_path(root_dir, "auto", name);
  core::progress_engine engine(core::poll_mode::event);
  std::string first;
  {
    setenv(socket_dir_variable, root_dir.c_str(), 1);
    server squatter(engine, {.name = name});
    first += attempt([&] { squatter.start(); });
    first += " " + socket_result(internal::listen_unix(root_path, 1));
  }
  setenv(socket_dir_variable, own_dir.c_str(), 1);
  server own(engine, {.name = name});
  first += " " + attempt([&] { own.start(); });
  say(report, first);

  pollfd p{go, POLLIN, 0};
  ::poll(&p, 1, int(wait_limit.count()));  // root's server is up now (or the test gave up)

  std::string second;
  {
    setenv(socket_dir_variable, root_dir.c_str(), 1);
    client intruder(engine, {.name = name});
    second += attempt([&] { intruder.start(); });
    second += " " + socket_result(internal::connect_unix(root_path));
  }
  say(report, second);
  own.stop();
  _exit(0);
}

TEST(comch_socket_dir, a_second_user_can_neither_take_nor_reach_a_channel) {
  if (geteuid() != 0)
    GTEST_SKIP() << "needs root to run a child as a second uid (" << other_uid
                 << "); running as uid " << geteuid();
  private_socket_dir dir;
  scratch_path their_dir;                                     // the second user creates it
  const std::string root_dir = internal::socket_directory();  // ours before they can take it
  const std::string name = channel_name();

  int report[2], go[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(report[0]);
    close(go[1]);
    try {
      run_second_user(report[1], go[0], root_dir, their_dir.path, name);
    } catch (...) {
      _exit(4);  // never back into the test runner in the child
    }
  }
  child_process child(pid);
  close(report[1]);
  close(go[0]);

  // (a) They tried to take the name first: refused in our directory (not theirs: uid 0 owns
  // it), bind refused by the kernel (no access), and their own server of the name runs.
  const auto taken = read_line(report[0], wait_limit);
  ASSERT_TRUE(taken) << "no report from the second user";
  EXPECT_EQ(*taken, "refused:DOCA_ERROR_NOT_PERMITTED errno:EACCES ok");

  // Our server still starts, and our client reaches it and nothing else.
  core::progress_engine engine(core::poll_mode::event);
  server srv(engine, {.name = name});
  ASSERT_EQ(srv.start(), status::success);
  client cli(engine, {.name = name});
  ASSERT_EQ(cli.start(), status::success);
  ASSERT_TRUE(engine.run_until(
      [&] { return cli.state() == context_state::running && srv.connection_count() == 1; },
      wait_limit));
  EXPECT_EQ(cli.get_connection()->peer_pid(), getpid());

  // Root reaches any directory; had their socket been put in our way, our client would still
  // refuse a server of another user.
  const std::string impostor = channel_name();
  ASSERT_EQ(symlink(socket_path(their_dir.path, "auto", name).c_str(),
                    socket_path(root_dir, "auto", impostor).c_str()),
            0);
  client fooled(engine, {.name = impostor});
  auto e = error_of([&] { fooled.start(); });
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), status::not_permitted) << e->what();

  // (b) They dial our channel: refused by the directory check and by the kernel.
  ASSERT_EQ(write(go[1], "g", 1), 1);
  const auto dialled = read_line(report[0], wait_limit);
  ASSERT_TRUE(dialled) << "no second report from the second user";
  EXPECT_EQ(*dialled, "refused:DOCA_ERROR_NOT_PERMITTED errno:EACCES");
  EXPECT_EQ(child.exit_status(report[0], wait_limit), 0);
  close(report[0]);
  close(go[1]);

  engine.progress();
  EXPECT_EQ(srv.connection_count(), 1u);
  EXPECT_EQ(srv.refused_peers(), 0u);
  cli.stop();
  srv.stop();
  EXPECT_TRUE(engine.run_until([&] { return cli.state() == context_state::idle; }, wait_limit));
}

}  // namespace
}  // namespace zc::comch::test
