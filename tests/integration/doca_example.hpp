// Builds the examples of examples/doca/ the way DOCA's samples are built (one meson project, the
// DOCA libraries found by pkg-config, here libzcstore-doca's build-tree .pc files), for the tests
// that then run them as real processes.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "support/subprocess.hpp"

namespace zc::test::doca {

using namespace std::chrono_literals;

inline constexpr auto build_timeout = 180s;

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

// What every example test has besides its program (built once per test process, into the suite's
// static built_example): a scratch folder per test for the descriptor files, removed after it.
class example_scratch {
 protected:
  // From SetUp: skips the test when meson is missing, fails it when the build failed.
  void prepare(const built_example& built, const std::string& tag) {
    if (!built.skip_reason.empty()) GTEST_SKIP() << built.skip_reason;
    ASSERT_TRUE(built.error.empty()) << "the example did not build:\n" << built.error;
    dir_ = std::filesystem::temp_directory_path() / unique_name(tag);
    std::filesystem::create_directories(dir_);
  }
  // From TearDown.
  void clean() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

}  // namespace zc::test::doca
