#include "supervisor.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <stdexcept>

#include "core/thread.hpp"

extern char** environ;

namespace zc::local {
namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Without the stop eventfd (handlers not installed) a request_stop() only sets a flag: poll in
// slices this long so a wait still notices it.
constexpr milliseconds stop_flag_slice{100};
// While processes are ending but have no fd to wait on (grandchildren), look again this often.
constexpr milliseconds group_check_slice{10};
// After SIGKILL: how long reaping and reading the last output may take. Only a process stuck in
// the kernel (D state) uses it up.
constexpr milliseconds after_kill_bound{1000};
constexpr milliseconds drain_bound{1000};
constexpr size_t read_chunk_bytes = 64 * 1024;
// The child's exit code when its parent died before PR_SET_PDEATHSIG took: it must not run
// unsupervised. 125 as in env(1)/timeout(1): "the launcher failed", not the program.
constexpr int orphaned_before_start_code = 125;

int pidfd_open(pid_t pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

milliseconds remaining(clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - clock::now());
  return std::max(left, milliseconds(0));
}

// argv[0] as a path: as given when it has a slash, else the first executable in PATH.
std::string resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(begin, end - begin);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return program;  // execve reports ENOENT
}

// Members of process group `group` that are still running (zombies are not: an orphan's zombie
// stays until init reaps it, and some container inits never do).
bool group_has_live_members(pid_t group) {
  if (group <= 0 || (::kill(-group, 0) != 0 && errno == ESRCH)) return false;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return true;  // cannot tell: assume so, the caller's wait is bounded
  bool found = false;
  while (dirent* entry = readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + entry->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses, so parse after
    // the last ')'.
    size_t close_paren = line.rfind(')');
    if (close_paren == std::string::npos) continue;
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (std::sscanf(line.c_str() + close_paren + 1, " %c %ld %ld", &state, &ppid, &pgrp) != 3)
      continue;
    if (pgrp == group && state != 'Z' && state != 'X') {
      found = true;
      break;
    }
  }
  closedir(proc);
  return found;
}

}  // namespace

std::string exit_status::describe() const {
  if (!signaled) return "exit code " + std::to_string(code);
  const char* what = strsignal(signal);
  return "killed by signal " + std::to_string(signal) +
         (what ? " (" + std::string(what) + ")" : "");
}

output_sink line_writer(int out_fd, int err_fd) {
  return [out_fd, err_fd](const output_line& line) {
    std::string text;
    text.reserve(line.child.size() + line.text.size() + 4);
    text.append("[").append(line.child).append("] ").append(line.text).append("\n");
    const int fd = line.stream == output_stream::out ? out_fd : err_fd;
    size_t done = 0;
    while (done < text.size()) {
      ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a closed terminal must not stop the supervision
      done += static_cast<size_t>(n);
    }
  };
}

struct supervisor::child {
  std::string name;
  pid_t pid = -1;
  int pidfd = -1;
  std::array<int, 2> pipe_fd{-1, -1};  // stdout, stderr (read ends, non-blocking)
  std::array<std::string, 2> partial;  // the line being assembled, < max_line_bytes
  std::array<bool, 2> just_split{false, false};
  std::deque<std::string> kept;
  std::optional<exit_status> status;
  bool exit_reported = false;

  bool output_open() const { return pipe_fd[0] >= 0 || pipe_fd[1] >= 0; }
};

supervisor::supervisor(supervisor_options options)
    : options_(std::move(options)), read_buffer_(read_chunk_bytes) {
  if (!options_.sink) options_.sink = [](const output_line&) {};
  options_.max_line_bytes = std::max<size_t>(options_.max_line_bytes, 1);
}

supervisor::~supervisor() {
  try {
    stop_all(options_.destructor_grace);
  } catch (...) {
    // A throwing sink must not turn a destructor into std::terminate: the children are
    // signalled before any output is emitted, and PDEATHSIG covers the rest.
  }
  for (auto& c : children_) {
    close_fd(c->pidfd);
    close_fd(c->pipe_fd[0]);
    close_fd(c->pipe_fd[1]);
  }
}

supervisor::child_id supervisor::start(child_spec spec) {
  if (spec.argv.empty()) throw std::invalid_argument("supervisor: empty argv for " + spec.name);
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  const std::string path = resolve_program(spec.argv[0]);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry = *e;
    if (!spec.env.count(std::string(entry.substr(0, entry.find('=')))))
      env_strings.emplace_back(entry);
  }
  for (const auto& [key, value] : spec.env) env_strings.push_back(key + "=" + value);
  std::vector<char*> argv, envp;
  for (auto& a : spec.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  // The group outlives its leader while it has members; once empty it is gone and a new child
  // founds a new one.
  if (group_ != 0 && !group_has_live_members(group_)) group_ = 0;
  const pid_t group = group_;

  int out[2] = {-1, -1}, err[2] = {-1, -1}, exec_error[2] = {-1, -1};
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 ||
      pipe2(exec_error, O_CLOEXEC) != 0) {
    int saved = errno;
    for (int fd : {devnull, out[0], out[1], err[0], err[1], exec_error[0], exec_error[1]})
      if (fd >= 0) ::close(fd);
    throw std::runtime_error("supervisor: cannot create pipes for " + spec.name + ": " +
                             std::strerror(saved));
  }

  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    int saved = errno;
    for (int fd : {devnull, out[0], out[1], err[0], err[1], exec_error[0], exec_error[1]})
      ::close(fd);
    throw std::runtime_error("supervisor: fork failed: " + std::string(std::strerror(saved)));
  }
  if (pid == 0) {
    auto fail = [&](int code) {
      int e = errno;
      [[maybe_unused]] ssize_t r = ::write(exec_error[1], &e, sizeof(e));
      _exit(code);
    };
    if (setpgid(0, group) != 0) fail(127);
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) fail(127);
    // The parent may have died between fork and prctl: then no signal will ever come.
    if (getppid() != parent) _exit(orphaned_before_start_code);
    // The launcher's handlers and mask are its own: a child starts with the defaults
    // (execve resets handlers, but not ignored signals or the mask).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    for (int s = 1; s < NSIG; ++s)
      if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (dup2(devnull, STDIN_FILENO) < 0 || dup2(out[1], STDOUT_FILENO) < 0 ||
        dup2(err[1], STDERR_FILENO) < 0)
      fail(127);
    execve(path.c_str(), argv.data(), envp.data());
    fail(127);
  }

  // Both sides set the group, so it is right whichever runs first. Failing here is fine:
  // EACCES means the child has already exec'd (having set it itself), ESRCH that it has died.
  (void)setpgid(pid, group == 0 ? pid : group);
  ::close(devnull);
  ::close(out[1]);
  ::close(err[1]);
  ::close(exec_error[1]);
  int child_errno = 0;
  ssize_t got;
  do {
    got = ::read(exec_error[0], &child_errno, sizeof(child_errno));  // EOF at a successful exec
  } while (got < 0 && errno == EINTR);
  ::close(exec_error[0]);
  if (got > 0) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    ::close(out[0]);
    ::close(err[0]);
    throw std::runtime_error("supervisor: cannot start " + spec.name + " (" + path +
                             "): " + std::strerror(child_errno));
  }
  if (group == 0) group_ = pid;

  auto c = std::make_unique<child>();
  c->name = std::move(spec.name);
  c->pid = pid;
  c->pipe_fd = {out[0], err[0]};
  for (int fd : c->pipe_fd) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  // A pidfd makes a child's exit one more fd to poll: no SIGCHLD handler, no polling waitpid.
  c->pidfd = pidfd_open(pid);
  if (c->pidfd < 0) {
    int saved = errno;
    ::kill(pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    ::close(out[0]);
    ::close(err[0]);
    throw std::runtime_error("supervisor: pidfd_open failed (Linux 5.3 or later is needed): " +
                             std::string(std::strerror(saved)));
  }
  children_.push_back(std::move(c));
  return children_.size() - 1;
}

pid_t supervisor::pid(child_id id) const {
  return children_.at(id)->pid;
}

const std::string& supervisor::name(child_id id) const {
  return children_.at(id)->name;
}

std::optional<exit_status> supervisor::status(child_id id) const {
  return children_.at(id)->status;
}

std::optional<std::string> supervisor::wait_for_line(child_id id, std::string_view text,
                                                     milliseconds timeout) {
  child& c = *children_.at(id);
  const auto deadline = clock::now() + timeout;
  for (;;) {
    for (const auto& line : c.kept)
      if (line.find(text) != std::string::npos) return line;
    if (!c.output_open() || clock::now() >= deadline) return std::nullopt;
    if (!pump(remaining(deadline), pump_mode::honour_stop)) return std::nullopt;
  }
}

std::optional<exit_status> supervisor::wait_exit(child_id id, milliseconds timeout) {
  return wait_exit(id, timeout, pump_mode::honour_stop);
}

std::optional<exit_status> supervisor::wait_exit_while_stopping(child_id id, milliseconds timeout) {
  return wait_exit(id, timeout, pump_mode::ignore_stop);
}

std::optional<exit_status> supervisor::wait_exit(child_id id, milliseconds timeout,
                                                 pump_mode mode) {
  child& c = *children_.at(id);
  const auto deadline = clock::now() + timeout;
  while (!c.status) {
    if (clock::now() >= deadline) return std::nullopt;
    if (!pump(remaining(deadline), mode)) return std::nullopt;
  }
  return c.status;
}

bool supervisor::signal(child_id id, int signo) {
  child& c = *children_.at(id);
  if (c.status) return false;
  // Not yet reaped, so the pid cannot have been reused.
  return ::kill(c.pid, signo) == 0;
}

std::optional<supervisor::child_id> supervisor::wait_any_exit(milliseconds timeout) {
  const auto deadline = clock::now() + timeout;
  for (;;) {
    bool any_running = false;
    for (child_id id = 0; id < children_.size(); ++id) {
      child& c = *children_[id];
      if (c.status && !c.exit_reported) {
        c.exit_reported = true;
        return id;
      }
      any_running = any_running || !c.status;
    }
    if (!any_running || clock::now() >= deadline) return std::nullopt;
    if (!pump(remaining(deadline), pump_mode::honour_stop)) return std::nullopt;
  }
}

bool supervisor::pump(milliseconds timeout, pump_mode mode) {
  const bool honour_stop = mode == pump_mode::honour_stop;
  if (honour_stop && core::stop_requested()) return false;
  std::vector<pollfd> fds;
  struct source {
    child* c;
    int kind;  // 0 stdout, 1 stderr, 2 exit
  };
  std::vector<source> sources;
  for (auto& c : children_) {
    for (int s = 0; s < 2; ++s)
      if (c->pipe_fd[s] >= 0) {
        fds.push_back({c->pipe_fd[s], POLLIN, 0});
        sources.push_back({c.get(), s});
      }
    if (!c->status && c->pidfd >= 0) {
      fds.push_back({c->pidfd, POLLIN, 0});
      sources.push_back({c.get(), 2});
    }
  }
  const int stop_fd = honour_stop ? core::stop_signal_fd() : -1;
  if (stop_fd >= 0) fds.push_back({stop_fd, POLLIN, 0});
  if (honour_stop && stop_fd < 0) timeout = std::min(timeout, stop_flag_slice);

  int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  if (ready > 0) {
    for (size_t i = 0; i < sources.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (sources[i].kind == 2)
        reap(*sources[i].c);
      else
        read_pipe(*sources[i].c, sources[i].kind);
    }
  }
  // EINTR: a signal arrived; the stop flag below tells whether it was a stop.
  return !(honour_stop && core::stop_requested());
}

void supervisor::read_pipe(child& c, int s) {
  ssize_t n = ::read(c.pipe_fd[s], read_buffer_.data(), read_buffer_.size());
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {  // end of output (or a broken pipe): the partial last line is a line
    close_fd(c.pipe_fd[s]);
    if (!c.partial[s].empty()) {
      std::string last = std::move(c.partial[s]);
      c.partial[s].clear();
      emit(c, s, last);
    }
    return;
  }
  const size_t max = options_.max_line_bytes;
  std::string& line = c.partial[s];
  std::string_view data(read_buffer_.data(), static_cast<size_t>(n));
  // A line of exactly max bytes was emitted when it filled up: its newline ends nothing more.
  if (c.just_split[s] && data.front() == '\n') data.remove_prefix(1);
  c.just_split[s] = false;
  while (!data.empty()) {
    const std::string_view chunk = data.substr(0, max - line.size());
    const size_t newline = chunk.find('\n');
    if (newline != std::string_view::npos) {
      line.append(chunk.substr(0, newline));
      emit(c, s, line);
      line.clear();
      data.remove_prefix(newline + 1);
      continue;
    }
    line.append(chunk);
    data.remove_prefix(chunk.size());
    if (line.size() == max) {
      emit(c, s, line);
      line.clear();
      if (!data.empty() && data.front() == '\n')
        data.remove_prefix(1);
      else if (data.empty())
        c.just_split[s] = true;
    }
  }
}

void supervisor::emit(child& c, int s, std::string_view text) {
  c.kept.emplace_back(text);
  if (c.kept.size() > options_.kept_lines) c.kept.pop_front();
  options_.sink({c.name, s == 0 ? output_stream::out : output_stream::err, text});
}

void supervisor::reap(child& c) {
  if (c.status) return;
  int st = 0;
  pid_t r;
  do {
    r = waitpid(c.pid, &st, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == c.pid) {
    exit_status status;
    if (WIFSIGNALED(st)) {
      status.signaled = true;
      status.signal = WTERMSIG(st);
    } else {
      status.code = WEXITSTATUS(st);
    }
    c.status = status;
    close_fd(c.pidfd);
  } else if (r < 0 && errno == ECHILD) {
    // Someone else reaped it (a SIGCHLD=SIG_IGN or a stray waitpid(-1)): the status is lost.
    c.status = exit_status{true, 0, 0};
    close_fd(c.pidfd);
  }
}

void supervisor::flush_and_close(child& c) {
  for (int s = 0; s < 2; ++s) {
    close_fd(c.pipe_fd[s]);
    if (!c.partial[s].empty()) {
      std::string last = std::move(c.partial[s]);
      c.partial[s].clear();
      emit(c, s, last);
    }
  }
}

void supervisor::drain_output(milliseconds bound) {
  const auto deadline = clock::now() + bound;
  auto open = [&] {
    return std::any_of(children_.begin(), children_.end(),
                       [](const auto& c) { return c->output_open(); });
  };
  while (open() && clock::now() < deadline) pump(remaining(deadline), pump_mode::ignore_stop);
  for (auto& c : children_) flush_and_close(*c);
}

void supervisor::stop_all(milliseconds grace) {
  auto any_running = [&] {
    return std::any_of(children_.begin(), children_.end(),
                       [](const auto& c) { return !c->status; });
  };
  const auto deadline = clock::now() + grace;
  // One SIGTERM per process, through the group: a second one would make a zcstore program
  // (core::install_stop_signal_handlers) die at once instead of stopping cleanly.
  const bool group_live = group_has_live_members(group_);
  if (group_live) ::killpg(group_, SIGTERM);

  while (any_running() && clock::now() < deadline)
    pump(remaining(deadline), pump_mode::ignore_stop);
  // Grandchildren have no fd to wait on: look at the group in short slices.
  while (group_has_live_members(group_) && clock::now() < deadline)
    pump(std::min(remaining(deadline), group_check_slice), pump_mode::ignore_stop);

  if (group_has_live_members(group_)) ::killpg(group_, SIGKILL);
  for (auto& c : children_)  // in case one left the group (setpgid/setsid of its own)
    if (!c->status) ::kill(c->pid, SIGKILL);
  const auto kill_deadline = clock::now() + after_kill_bound;
  while (any_running() && clock::now() < kill_deadline)
    pump(remaining(kill_deadline), pump_mode::ignore_stop);
  drain_output(drain_bound);
}

}  // namespace zc::local
