// zcstore_local zero-copy with the real programs: target, zero-copy service and initiator on
// 127.0.0.1, driven the way a user drives them. Every wait is bounded; event polling only (a
// 2-core machine runs all four processes). Skipped, with a message, only while the service or
// initiator program is not built yet.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "support/subprocess.hpp"

namespace zc {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;

// A short run's whole life (start, 256 to 2000 IOs, wind-down) on a loaded 2-core machine.
constexpr auto run_bound = 120s;
// The launcher's stop: the session's end in order (control timeout 5 s + 10 s), 5 s SIGTERM
// grace, then SIGKILL; plus slack for a loaded machine.
constexpr auto stop_bound = 40s;
constexpr auto gone_bound = 15s;
constexpr auto start_bound = 60s;

const std::map<std::string, std::string> ucx_env{{"UCX_MM_ERROR_HANDLING", "y"},
                                                 {"UCX_KEEPALIVE_INTERVAL", "1s"},
                                                 {"UCX_WARN_UNUSED_ENV_VARS", "n"}};

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

// The children's pids, from the launcher's "started <name> (pid N)" lines. (No std::regex: GCC
// 12 warns about its internals in the sanitizer build, and warnings are errors.)
std::map<std::string, pid_t> child_pids(const std::string& output) {
  std::map<std::string, pid_t> pids;
  const std::string started = "zcstore_local: started ";
  for (size_t at = output.find(started); at != std::string::npos;
       at = output.find(started, at + 1)) {
    const size_t name_begin = at + started.size();
    const size_t name_end = output.find(" (pid ", name_begin);
    if (name_end == std::string::npos) break;
    pids[output.substr(name_begin, name_end - name_begin)] =
        std::atoi(output.c_str() + name_end + 6);
  }
  return pids;
}

bool has_line(const std::string& output, const std::string& prefix, const std::string& text) {
  size_t at = 0;
  while ((at = output.find(prefix, at)) != std::string::npos) {
    if ((at == 0 || output[at - 1] == '\n')) {
      const size_t end = output.find('\n', at);
      if (output.substr(at, end - at).find(text) != std::string::npos) return true;
    }
    at += prefix.size();
  }
  return false;
}

class temp_dir {
 public:
  temp_dir() {
    std::string templ = (fs::temp_directory_path() / "zc-local-it-XXXXXX").string();
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

void write_random_file(const std::string& path, size_t bytes, uint32_t seed) {
  std::mt19937 random(seed);
  std::string data(bytes, '\0');
  for (auto& c : data) c = static_cast<char>(random());
  std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(bytes));
}

class local_pipeline : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* program : {"zcstore_comch_to_rdma_zero_copy", "zcstore_initiator_comch"})
      if (!fs::exists(test::binary(program)))
        GTEST_SKIP() << program << " is not built yet (" << test::binary(program)
                     << "): zcstore_local has no pipeline to run";
  }

  // zcstore_local zero-copy on a 1 MiB target with event polling, plus `extra`.
  static std::vector<std::string> launcher(std::vector<std::string> extra) {
    std::vector<std::string> argv{test::binary("zcstore_local"),
                                  "zero-copy",
                                  "--poll-mode",
                                  "event",
                                  "--target-size",
                                  "1MiB"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }

  // Waits until the initiator's data path runs (its "running <strategy>" line: after "Async
  // init complete" it still waits for the start response, and a stop then is no run to drain).
  static std::map<std::string, pid_t> wait_until_running(test::subprocess& run) {
    if (!run.wait_for_output("running read_throughput_test", start_bound)) return {};
    return child_pids(run.output());
  }
};

TEST_F(local_pipeline, read_write_validity_run_succeeds_with_stats_from_all_three) {
  test::subprocess run(launcher({"--", "--execution-strategy", "read_write_data_validity_test",
                                 "--run-limit-operation-count", "2000"}),
                       ucx_env);
  ASSERT_EQ(run.wait(run_bound), 0) << run.output();
  const std::string out = run.output();
  EXPECT_TRUE(has_line(out, "initiator | ", "| Stats")) << out;
  EXPECT_TRUE(has_line(out, "initiator | ", "| Operation count: 2000")) << out;
  EXPECT_TRUE(has_line(out, "service | ", "| Core: 0")) << out;
  EXPECT_TRUE(has_line(out, "target | ", "| Core: 0")) << out;
  EXPECT_TRUE(has_line(out, "target | ", "| Operation count:")) << out;
  auto pids = child_pids(out);
  ASSERT_EQ(pids.size(), 3u) << out;
  for (const auto& [name, pid] : pids) EXPECT_FALSE(alive(pid)) << name;
}

TEST_F(local_pipeline, failing_initiator_fails_the_run_and_leaves_nothing_running) {
  temp_dir dir;
  constexpr size_t size = 1 << 20;
  write_random_file(dir / "stored.bin", size, 1);
  write_random_file(dir / "expected.bin", size, 2);  // not what the target holds
  test::subprocess run(launcher({"--content", dir / "stored.bin", "--", "--execution-strategy",
                                 "read_only_data_validity_test", "--storage-plain-content",
                                 dir / "expected.bin", "--run-limit-operation-count", "256"}),
                       ucx_env);
  auto status = run.wait(run_bound);
  ASSERT_TRUE(status.has_value()) << run.output();
  EXPECT_NE(*status, 0) << run.output();
  EXPECT_TRUE(has_line(run.output(), "initiator | ", "Test failed")) << run.output();
  auto pids = child_pids(run.output());
  ASSERT_EQ(pids.size(), 3u) << run.output();
  for (const auto& [name, pid] : pids) EXPECT_FALSE(alive(pid)) << name;
}

TEST_F(local_pipeline, sigterm_mid_run_stops_all_three) {
  test::subprocess run(launcher({"--", "--run-limit-operation-count", "1000000000"}), ucx_env);
  auto pids = wait_until_running(run);
  ASSERT_EQ(pids.size(), 3u) << run.output();
  run.signal(SIGTERM);
  ASSERT_EQ(run.wait(stop_bound), 128 + SIGTERM) << run.output();
  for (const auto& [name, pid] : pids) EXPECT_TRUE(gone_within(pid, gone_bound)) << name;
  // The initiator alone got the signal: it drained and ended the session, so all three printed
  // their stats.
  const std::string out = run.output();
  EXPECT_TRUE(has_line(out, "initiator | ", "| Operation count:")) << out;
  EXPECT_TRUE(has_line(out, "service | ", "| Core: 0")) << out;
  EXPECT_TRUE(has_line(out, "target | ", "| Core: 0")) << out;
}

TEST_F(local_pipeline, sigkill_to_the_launcher_leaves_no_children) {
  test::subprocess run(launcher({"--", "--run-limit-operation-count", "1000000000"}), ucx_env);
  auto pids = wait_until_running(run);
  ASSERT_EQ(pids.size(), 3u) << run.output();
  run.signal(SIGKILL);
  ASSERT_EQ(run.wait(stop_bound), 128 + SIGKILL);
  // PR_SET_PDEATHSIG: every child gets SIGTERM when the launcher dies, and stops cleanly.
  for (const auto& [name, pid] : pids) EXPECT_TRUE(gone_within(pid, gone_bound)) << name;
}

TEST_F(local_pipeline, target_that_cannot_start_is_named) {
  temp_dir dir;
  test::subprocess run(launcher({"--content", dir / "missing.bin"}), ucx_env);
  auto status = run.wait(run_bound);
  ASSERT_TRUE(status.has_value()) << run.output();
  EXPECT_NE(*status, 0);
  EXPECT_NE(run.output().find("target exited before it was ready (exit code 1)"), std::string::npos)
      << run.output();
  auto pids = child_pids(run.output());
  EXPECT_EQ(pids.count("service"), 0u) << run.output();
  for (const auto& [name, pid] : pids) EXPECT_FALSE(alive(pid)) << name;
}

// --backing-dir that names a file: one line, exit 2, nothing started (a folder that does not exist
// yet is made: nbd_pipeline.local_zero_copy_keeps_every_byte_across_a_restart_over_backing_dir).
TEST_F(local_pipeline, a_backing_dir_that_is_a_file_is_refused_before_anything_starts) {
  temp_dir dir;
  const std::string file = dir / "plain";
  std::ofstream(file) << "not a folder";
  test::subprocess run(launcher({"--backing-dir", file}), ucx_env);
  auto status = run.wait(run_bound);
  ASSERT_TRUE(status.has_value()) << run.output();
  EXPECT_EQ(*status, 2) << run.output();
  EXPECT_NE(run.output().find("--backing-dir " + file + ": not a folder"), std::string::npos)
      << run.output();
  EXPECT_TRUE(child_pids(run.output()).empty()) << run.output();
}

// zcstore_local gga: the generator makes the images of a compressible plain file of its own, three
// targets serve them, and the gga service rebuilds every 3rd block read from the other half and
// the parity while the initiator validates every read against the plain file.
class local_gga_pipeline : public testing::Test {
 protected:
  void SetUp() override {
    for (const char* program : {"zcstore_gga_offload_sbc_generator",
                                "zcstore_comch_to_rdma_gga_offload", "zcstore_initiator_comch"})
      if (!fs::exists(test::binary(program)))
        GTEST_SKIP() << program << " is not built yet (" << test::binary(program)
                     << "): zcstore_local gga has no pipeline to run";
  }
};

TEST_F(local_gga_pipeline, validity_run_with_recovery_every_3rd_read_succeeds) {
  test::subprocess run(
      {test::binary("zcstore_local"), "gga", "--recovery-every", "3", "--poll-mode", "event",
       "--target-size", "4MiB", "--", "--run-limit-operation-count", "3000"},
      ucx_env);
  ASSERT_EQ(run.wait(run_bound), 0) << run.output();
  const std::string out = run.output();
  EXPECT_TRUE(has_line(out, "generator | ", "created successfully")) << out;
  EXPECT_TRUE(has_line(out, "initiator | ", "| Stats")) << out;
  EXPECT_TRUE(has_line(out, "initiator | ", "| Operation count: 3000")) << out;
  EXPECT_TRUE(has_line(out, "initiator | ", "read_only_data_validity_test")) << out;
  // 3000 single-block reads, every 3rd rebuilt.
  EXPECT_TRUE(has_line(out, "service | ", "| Recovery count: 1000")) << out;
  for (const char* target : {"target1 | ", "target2 | ", "target3 | "})
    EXPECT_TRUE(has_line(out, target, "| Core: 0")) << target << out;
  auto pids = child_pids(out);
  ASSERT_EQ(pids.size(), 6u) << out;  // generator, three targets, service, initiator
  for (const auto& [name, pid] : pids) EXPECT_FALSE(alive(pid)) << name;
  // The generated plain file's folder (with the images) is gone.
  const std::string made = "bytes: ";
  const size_t at = out.find(made);
  ASSERT_NE(at, std::string::npos) << out;
  const std::string plain = out.substr(at + made.size(), out.find('\n', at) - at - made.size());
  EXPECT_FALSE(fs::exists(fs::path(plain).parent_path())) << plain;
}

TEST_F(local_gga_pipeline, sigterm_mid_run_stops_all_five_in_order) {
  test::subprocess run(
      {test::binary("zcstore_local"), "gga", "--recovery-every", "2", "--poll-mode", "event",
       "--target-size", "1MiB", "--", "--run-limit-operation-count", "1000000000"},
      ucx_env);
  ASSERT_TRUE(run.wait_for_output("running read_only_data_validity_test", start_bound))
      << run.output();
  auto pids = child_pids(run.output());
  ASSERT_EQ(pids.size(), 6u) << run.output();
  run.signal(SIGTERM);
  ASSERT_EQ(run.wait(stop_bound), 128 + SIGTERM) << run.output();
  for (const auto& [name, pid] : pids) EXPECT_TRUE(gone_within(pid, gone_bound)) << name;
  // The initiator alone got the signal and ended the session: everyone printed stats.
  const std::string out = run.output();
  EXPECT_TRUE(has_line(out, "initiator | ", "| Operation count:")) << out;
  EXPECT_TRUE(has_line(out, "service | ", "| Recovery count:")) << out;
  EXPECT_TRUE(has_line(out, "target3 | ", "| Core: 0")) << out;
}

TEST_F(local_gga_pipeline, content_of_partial_blocks_is_refused) {
  temp_dir dir;
  write_random_file(dir / "odd.bin", 10000, 3);
  test::subprocess run({test::binary("zcstore_local"), "gga", "--content", dir / "odd.bin"},
                       ucx_env);
  ASSERT_EQ(run.wait(run_bound), 1) << run.output();
  EXPECT_NE(run.output().find("not a non-empty file of whole 8192-byte blocks"), std::string::npos)
      << run.output();
  EXPECT_TRUE(child_pids(run.output()).empty()) << run.output();
}

}  // namespace
}  // namespace zc
