#include "support/subprocess.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace zc::test {

subprocess::subprocess(std::vector<std::string> argv,
                       std::map<std::string, std::string> extra_env) {
  output_path_ = "/tmp/" + unique_name("zc-child") + ".log";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    auto key = entry.substr(0, entry.find('='));
    if (!extra_env.count(key)) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : extra_env) env_strings.push_back(k + "=" + v);

  std::vector<char*> args, envp;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out = open(output_path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (out < 0) throw std::runtime_error("cannot create " + output_path_);
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    dup2(out, STDOUT_FILENO);
    dup2(out, STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(out);
}

subprocess::~subprocess() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    wait(std::chrono::seconds(5));
  }
  if (!getenv("ZC_KEEP_CHILD_LOGS")) unlink(output_path_.c_str());
}

std::optional<int> subprocess::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!exit_status_) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      exit_status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return exit_status_;
}

bool subprocess::running() {
  return !wait(std::chrono::milliseconds(0)).has_value();
}

void subprocess::signal(int signo) {
  if (running()) ::kill(pid_, signo);
}

std::string subprocess::output() const {
  std::ifstream in(output_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool subprocess::wait_for_output(const std::string& text, std::chrono::milliseconds timeout,
                                 size_t times) {
  const auto found = [&] {
    const std::string out = output();
    size_t n = 0;
    for (size_t at = out.find(text); at != std::string::npos && n < times;
         at = out.find(text, at + text.size()))
      ++n;
    return n >= times;
  };
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (found()) return true;
    if (!running()) return found();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

uint16_t free_tcp_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("cannot find a free port");
  close(fd);
  return ntohs(addr.sin_port);
}

std::string unique_name(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

std::string binary(const std::string& program) {
  return std::string(ZC_BINARY_DIR) + "/apps/" + program.substr(program.find('_') + 1) + "/" +
         program;
}

}  // namespace zc::test

namespace zc::test {

bool subprocess::wait_stopped(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::string path = "/proc/" + std::to_string(pid_) + "/stat";
  for (;;) {
    std::ifstream in(path);
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    // "pid (comm) S ...": the state follows the last ')'.
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() &&
        (stat[close + 2] == 'T' || stat[close + 2] == 't'))
      return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace zc::test
