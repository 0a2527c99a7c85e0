// Test helper: runs a program as a child process with its output in a file, and waits for it
// with a bound, so a failing integration test is a red test, never a hang. The child is killed
// (SIGKILL) when the object goes out of scope.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zc::test {

class subprocess {
 public:
  // Starts argv[0] with argv; extra_env is added to (and overrides) this process's environment.
  subprocess(std::vector<std::string> argv, std::map<std::string, std::string> extra_env = {});
  ~subprocess();
  subprocess(const subprocess&) = delete;
  subprocess& operator=(const subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Exit status (or 128 + signal) once the child has ended; nullopt if still running at timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  bool running();
  void signal(int signo);
  // After signal(SIGSTOP): waits until the kernel has really stopped the child (kill() returns
  // before it has; a stopped child does nothing more); false on timeout.
  bool wait_stopped(std::chrono::milliseconds timeout);
  // Everything the child printed on stdout and stderr so far.
  std::string output() const;
  // Waits until the output contains `text` (`times` times or more); false on timeout or if the
  // child exits first.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout,
                       size_t times = 1);

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  std::string output_path_;
};

// A TCP port that was free a moment ago (bind to port 0, read it back, close).
uint16_t free_tcp_port();
// A name no other test run uses (pid + counter), for comch channels and files.
std::string unique_name(const std::string& prefix);
// Path of a built program, e.g. binary("zcstore_target_rdma").
std::string binary(const std::string& program);

}  // namespace zc::test
