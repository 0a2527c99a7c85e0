// Builds the examples of examples/doca/ the way DOCA's samples are built (one meson project, the
// DOCA libraries found by pkg-config, here libzcstore-doca's build-tree .pc files), and runs them
// as real processes, two at a time, as a DOCA sample's two sides run.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "support/subprocess.hpp"

namespace zc::test::doca {

using namespace std::chrono_literals;

inline constexpr auto build_timeout = 180s;
inline constexpr auto run_timeout = 90s;

// What the examples' processes need of UCX (README, "UCX settings").
inline std::map<std::string, std::string> ucx_env() {
  return {{"UCX_MM_ERROR_HANDLING", "y"},
          {"UCX_KEEPALIVE_INTERVAL", "1s"},
          {"UCX_WARN_UNUSED_ENV_VARS", "n"}};
}

// Runs a shell command with a bound; returns its exit status (-1 on timeout) and output.
inline int run_shell(const std::string& command, std::string& output,
                     std::chrono::milliseconds timeout = build_timeout) {
  subprocess p({"/bin/sh", "-c", command});
  auto status = p.wait(timeout);
  output = p.output();
  return status ? *status : -1;
}

struct built_example {
  std::filesystem::path dir;  // where the example's program is, in the meson build directory
  std::string skip_reason;    // set when meson is missing
  std::string error;          // set when the build failed
};

// Builds examples/doca into the build tree, where it is kept between runs (ctest runs each test
// in its own process, some at once: flock takes turns): ninja rebuilds what changed, meson
// reconfigures itself. The program of examples/doca/<name> is then in dir.
inline built_example build_example(const std::string& name) {
  built_example b;
  std::string out;
  if (run_shell("command -v meson", out, 10s) != 0) {
    b.skip_reason = "meson is not installed (scripts/dev.sh deps installs it)";
    return b;
  }
  namespace fs = std::filesystem;
  const fs::path root = fs::path(ZC_BINARY_DIR) / "examples/doca";
  b.dir = root / name;
  std::string options = "-Dwerror=true";
#ifdef ZC_DOCA_EXAMPLES_SANITIZE
  // The library is built with ASan/UBSan: a program that loads it needs the same runtimes.
  options += " -Db_sanitize=address,undefined -Db_lundef=false";
#endif
  const std::string r = root.string();
  std::error_code ignored;
  fs::create_directories(root.parent_path(), ignored);  // for the lock file, on a fresh tree
  // Configured once (a directory left by an older layout is replaced), then brought up to date;
  // all under one lock, since another test process may be building at the same time.
  const std::string command =
      "flock " + r + ".lock sh -c 'if [ ! -f " + r + "/build.ninja ]; then rm -rf " + r +
      " && PKG_CONFIG_PATH=" + std::string(ZC_BINARY_DIR) + "/compat/doca/pkgconfig meson setup " +
      options + " " + r + " " + ZC_SOURCE_DIR + "/examples/doca || exit 1; fi; ninja -C " + r + "'";
  if (run_shell(command, out) != 0) b.error = command + "\n" + out;
  return b;
}

// What one example process did.
struct outcome {
  int status = -1;  // exit status; -1 when it was still running at the bound (then killed)
  std::string output;
};

// Runs the two sides of an example at once (each waits for the other's descriptor) with the UCX
// environment (`env` adds to it and wins), and waits for both, each within run_timeout.
inline std::pair<outcome, outcome> run_pair(const std::vector<std::string>& first,
                                            const std::vector<std::string>& second,
                                            std::map<std::string, std::string> env = {}) {
  for (auto& [k, v] : ucx_env()) env.emplace(k, v);
  subprocess a(first, env);
  subprocess b(second, env);
  auto a_status = a.wait(run_timeout);
  auto b_status = b.wait(run_timeout);
  return {{a_status.value_or(-1), a.output()}, {b_status.value_or(-1), b.output()}};
}

// What every example test has besides its own checks: the example's program, built once per test
// process, and a scratch folder per test for the descriptor files, removed after it.
class example_scratch {
 protected:
  // From SetUp: builds examples/doca/<name> (first time in this process), skips the test when meson
  // is missing, fails it when the build failed.
  void prepare(const std::string& name, const std::string& tag) {
    static std::map<std::string, built_example> built;
    auto it = built.find(name);
    if (it == built.end()) it = built.emplace(name, build_example(name)).first;
    if (!it->second.skip_reason.empty()) GTEST_SKIP() << it->second.skip_reason;
    ASSERT_TRUE(it->second.error.empty()) << "the example did not build:\n" << it->second.error;
    program_ = (it->second.dir / ("doca_" + name)).string();
    dir_ = std::filesystem::temp_directory_path() / unique_name(tag);
    std::filesystem::create_directories(dir_);
  }
  // From TearDown.
  void clean() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  const std::string& program() const { return program_; }

  // The flags every example side takes (DOCA's sample spelling), then `more`.
  std::vector<std::string> side_args(const std::string& role, const std::string& device,
                                     const std::string& local, const std::string& remote,
                                     std::vector<std::string> more) const {
    std::vector<std::string> args = {program(), "--role",    role,  "-d",        device,
                                     "-ld",     path(local), "-re", path(remote)};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  std::string program_;
  std::filesystem::path dir_;
};

}  // namespace zc::test::doca
