// zcstore_local zero-copy as a real process, with /bin/sh stand-ins for the three programs
// (--bin-dir), so that its start order, output, exit status and stops are checked without the
// real pipeline (tests/integration/local_test.cpp runs that). Every wait is bounded.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/subprocess.hpp"
#include "zero_copy_launcher.hpp"

namespace zc::local {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

// The launcher's own bounds are 30 s to start, 10 s + control timeout to wind down, 5 s to stop.
constexpr auto run_bound = 30s;
constexpr auto gone_bound = 10s;
constexpr auto file_bound = 10s;

bool alive(pid_t pid) {
  if (pid <= 0 || ::kill(pid, 0) != 0) return false;
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

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A folder of stand-in programs. Each records its pid and arguments, then runs its body. By
// default they behave like the real ones: the target and service announce themselves and end
// once the initiator has written "done"; the initiator prints stats and ends.
class fake_programs {
 public:
  fake_programs() {
    std::string templ = (fs::temp_directory_path() / "zc-local-fake-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = templ;
    target = "echo 'target: v0'; echo '[info] listening on port 4242'; " + until_done() +
             "; echo 'target stats'";
    service = "echo \"[info] listening on channel $CHANNEL\"; " + until_done();
    initiator = "echo '| Stats'; echo '| operations: 10'; touch " + path("done");
  }
  ~fake_programs() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string until_done() const {
    return "while [ ! -e " + path("done") + " ]; do sleep 0.02; done";
  }

  std::string target, service, initiator;

  // Writes the three programs; `skip` is left out.
  void write(const std::string& skip = {}) {
    write_one(target_program, "target", target, skip);
    write_one(service_program, "service", service, skip);
    write_one(initiator_program, "initiator", initiator, skip);
  }

  // The pid a stand-in recorded, waiting a bounded time for it; 0 if it never started.
  pid_t pid(const std::string& name, std::chrono::milliseconds bound = file_bound) const {
    const auto deadline = clock::now() + bound;
    for (;;) {
      std::string text = read_text(path(name + ".pid"));
      if (!text.empty() && text.back() == '\n') return std::stoi(text);
      if (clock::now() >= deadline) return 0;
      std::this_thread::sleep_for(10ms);
    }
  }
  std::vector<std::string> args(const std::string& name) const {
    std::vector<std::string> out;
    std::istringstream in(read_text(path(name + ".args")));
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  bool started(const std::string& name) const { return fs::exists(path(name + ".pid")); }

 private:
  void write_one(const std::string& program, const std::string& name, const std::string& body,
                 const std::string& skip) {
    if (name == skip) return;
    const std::string file = path(program);
    std::ofstream out(file);
    // The args file is complete before the pid file appears.
    out << "#!/bin/sh\n"
        << "printf '%s\\n' \"$@\" > " << path(name + ".args") << "\n"
        << "CHANNEL=$(sed -n '/^--command-channel-name$/{n;p;}' " << path(name + ".args") << ")\n"
        << "echo $$ > " << path(name + ".pid.tmp") << " && mv " << path(name + ".pid.tmp") << " "
        << path(name + ".pid") << "\n"
        << body << "\n";
    out.close();
    ::chmod(file.c_str(), 0755);
  }

  fs::path dir_;
};

std::vector<std::string> launcher_argv(const fake_programs& fakes,
                                       std::vector<std::string> extra = {}) {
  std::vector<std::string> argv{
      test::binary("zcstore_local"), "zero-copy", "--bin-dir", fakes.path(""),
      "--control-timeout",           "1"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return argv;
}

std::string value_after(const std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == flag) return args[i + 1];
  return {};
}

TEST(zero_copy_launcher, successful_run_prefixes_every_line_and_exits_zero) {
  fake_programs fakes;
  fakes.write();
  test::subprocess launcher(launcher_argv(fakes));
  ASSERT_EQ(launcher.wait(run_bound), 0) << launcher.output();
  const std::string out = launcher.output();
  for (const char* line : {"target | [info] listening on port 4242\n", "target | target stats\n",
                           "service | [info] listening on channel ", "initiator | | Stats\n",
                           "initiator | | operations: 10\n"})
    EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
  // The service was pointed at the port the target logged, and both ends use one channel.
  const auto service = fakes.args("service"), initiator = fakes.args("initiator");
  EXPECT_EQ(value_after(service, "--storage-server"), "127.0.0.1:4242");
  const std::string channel = value_after(service, "--command-channel-name");
  EXPECT_FALSE(channel.empty());
  EXPECT_EQ(value_after(initiator, "--command-channel-name"), channel);
  EXPECT_EQ(value_after(fakes.args("target"), "--listen-port"), "0");
}

TEST(zero_copy_launcher, initiator_words_reach_the_initiator) {
  fake_programs fakes;
  fakes.write();
  test::subprocess launcher(
      launcher_argv(fakes, {"--", "--execution-strategy", "write_throughput_test"}));
  ASSERT_EQ(launcher.wait(run_bound), 0) << launcher.output();
  EXPECT_EQ(value_after(fakes.args("initiator"), "--execution-strategy"), "write_throughput_test");
}

TEST(zero_copy_launcher, initiator_failure_is_the_exit_status_and_stops_the_others) {
  fake_programs fakes;
  fakes.initiator = "echo '| Test failed!!' >&2; exit 3";
  fakes.write();
  test::subprocess launcher(launcher_argv(fakes));
  ASSERT_EQ(launcher.wait(run_bound), 3) << launcher.output();
  EXPECT_NE(launcher.output().find("initiator | | Test failed!!"), std::string::npos);
  EXPECT_NE(launcher.output().find("initiator failed (exit code 3)"), std::string::npos);
  EXPECT_TRUE(gone_within(fakes.pid("target"), gone_bound));
  EXPECT_TRUE(gone_within(fakes.pid("service"), gone_bound));
}

TEST(zero_copy_launcher, target_that_cannot_start_is_named_with_its_status) {
  fake_programs fakes;
  fakes.target = "echo 'cannot open /no/such/file' >&2; exit 1";
  fakes.write();
  test::subprocess launcher(launcher_argv(fakes));
  ASSERT_EQ(launcher.wait(run_bound), 1) << launcher.output();
  EXPECT_NE(launcher.output().find("target | cannot open /no/such/file"), std::string::npos);
  EXPECT_NE(launcher.output().find("target exited before it was ready (exit code 1)"),
            std::string::npos)
      << launcher.output();
  EXPECT_FALSE(fakes.started("service"));
  EXPECT_FALSE(fakes.started("initiator"));
}

TEST(zero_copy_launcher, service_failure_during_the_run_stops_the_initiator) {
  fake_programs fakes;
  fakes.service = "echo \"listening on channel $CHANNEL\"; sleep 0.3; exit 4";
  fakes.initiator = "exec sleep 100";
  fakes.write();
  test::subprocess launcher(launcher_argv(fakes));
  ASSERT_EQ(launcher.wait(run_bound), 1) << launcher.output();
  EXPECT_NE(launcher.output().find("service failed while the initiator was running (exit code 4)"),
            std::string::npos)
      << launcher.output();
  EXPECT_TRUE(gone_within(fakes.pid("initiator"), gone_bound));
  EXPECT_TRUE(gone_within(fakes.pid("target"), gone_bound));
}

TEST(zero_copy_launcher, service_that_stays_after_the_initiator_is_a_failure) {
  fake_programs fakes;
  fakes.service = "echo \"listening on channel $CHANNEL\"; exec sleep 100";
  fakes.write();
  test::subprocess launcher(launcher_argv(fakes));
  ASSERT_EQ(launcher.wait(run_bound), 1) << launcher.output();
  EXPECT_NE(launcher.output().find("service did not exit within"), std::string::npos)
      << launcher.output();
  EXPECT_TRUE(gone_within(fakes.pid("service"), gone_bound));
}

TEST(zero_copy_launcher, missing_program_is_named) {
  fake_programs fakes;
  fakes.write("service");
  test::subprocess launcher(launcher_argv(fakes));
  ASSERT_EQ(launcher.wait(run_bound), 1) << launcher.output();
  EXPECT_NE(launcher.output().find("cannot find zcstore_comch_to_rdma_zero_copy"),
            std::string::npos)
      << launcher.output();
  EXPECT_FALSE(fakes.started("target"));
}

// The initiator alone gets the signal, ends the session (here: writes "done"), and the service
// and target then end on their own, as the real programs do.
TEST(zero_copy_launcher, sigterm_and_sigint_reach_the_initiator_and_the_session_ends_in_order) {
  for (int signo : {SIGTERM, SIGINT}) {
    fake_programs fakes;
    fakes.initiator = "trap 'echo stopped; touch " + fakes.path("done") +
                      "; exit 7' TERM INT; echo running; while :; do sleep 0.02; done";
    fakes.write();
    test::subprocess launcher(launcher_argv(fakes));
    const pid_t pids[] = {fakes.pid("target"), fakes.pid("service"), fakes.pid("initiator")};
    for (pid_t pid : pids) ASSERT_NE(pid, 0) << launcher.output();
    ASSERT_TRUE(launcher.wait_for_output("initiator | running", file_bound)) << launcher.output();
    launcher.signal(signo);
    ASSERT_EQ(launcher.wait(run_bound), 128 + signo) << launcher.output();
    for (pid_t pid : pids) EXPECT_TRUE(gone_within(pid, gone_bound)) << pid;
    const std::string out = launcher.output();
    EXPECT_NE(out.find("stopping the pipeline"), std::string::npos) << out;
    // The target ended its own way (after "done"), not by the launcher's SIGTERM.
    EXPECT_NE(out.find("target | target stats"), std::string::npos) << out;
    EXPECT_EQ(out.find("did not end"), std::string::npos) << out;
  }
}

TEST(zero_copy_launcher, an_initiator_that_ignores_the_stop_is_stopped_after_a_bound) {
  fake_programs fakes;
  // Ignored signals stay ignored across exec.
  fakes.initiator = "trap '' TERM INT; echo ignoring; exec sleep 100";
  fakes.write();
  test::subprocess launcher(launcher_argv(fakes));
  const pid_t pids[] = {fakes.pid("target"), fakes.pid("service"), fakes.pid("initiator")};
  for (pid_t pid : pids) ASSERT_NE(pid, 0) << launcher.output();
  ASSERT_TRUE(launcher.wait_for_output("initiator | ignoring", file_bound)) << launcher.output();
  launcher.signal(SIGTERM);
  // 10 s + the control timeout for the session to end, 5 s of SIGTERM grace, then SIGKILL.
  ASSERT_EQ(launcher.wait(run_bound), 128 + SIGTERM) << launcher.output();
  EXPECT_NE(launcher.output().find("initiator did not end within"), std::string::npos)
      << launcher.output();
  for (pid_t pid : pids) EXPECT_TRUE(gone_within(pid, gone_bound)) << pid;
}

TEST(zero_copy_launcher, sigkill_leaves_no_children) {
  fake_programs fakes;
  fakes.initiator = "exec sleep 100";
  fakes.write();
  test::subprocess launcher(launcher_argv(fakes));
  const pid_t pids[] = {fakes.pid("target"), fakes.pid("service"), fakes.pid("initiator")};
  for (pid_t pid : pids) ASSERT_NE(pid, 0) << launcher.output();
  launcher.signal(SIGKILL);
  ASSERT_EQ(launcher.wait(run_bound), 128 + SIGKILL);
  // PR_SET_PDEATHSIG: each child gets SIGTERM when the launcher dies.
  for (pid_t pid : pids) EXPECT_TRUE(gone_within(pid, gone_bound)) << pid;
}

}  // namespace
}  // namespace zc::local
