// The process supervisor of zcstore_local: starts named child programs in one process group,
// re-emits their output line by line prefixed "[name] ", waits for lines and exits with bounds,
// and stops every child (and grandchild) on success, failure, Ctrl-C or SIGTERM.
// Thread rules: one thread owns a supervisor and calls all of it. That thread must live as long
// as the children: PR_SET_PDEATHSIG fires when the *thread* that forked a child ends.
//
//   zc::core::install_stop_signal_handlers();   // Ctrl-C / SIGTERM wake the waits below
//   zc::local::supervisor sup;
//   auto target = sup.start({.name = "target", .argv = {path, "--listen-port", "0"}});
//   auto line = sup.wait_for_line(target, "listening on port", 20s);
//   ...
//   sup.stop_all(5s);                           // also done by the destructor
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zc::local {

// What to start. argv[0] is a path, or a name looked up in PATH before forking.
struct child_spec {
  std::string name;  // the output prefix, "[name] "
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to (and overriding) this process's environment
};

// How a child ended.
struct exit_status {
  bool signaled = false;
  int code = 0;    // exit code when !signaled
  int signal = 0;  // terminating signal when signaled
  // The shell's convention: the exit code, or 128 + signal. What zcstore_local returns.
  int shell_code() const { return signaled ? 128 + signal : code; }
  std::string describe() const;  // "exit code 3", "killed by signal 9 (Killed)"
  bool operator==(const exit_status&) const = default;
};

enum class output_stream { out, err };

// One line of a child's output, without its newline. Lines longer than
// supervisor_options::max_line_bytes arrive as several lines of at most that many bytes.
struct output_line {
  std::string_view child;
  output_stream stream;
  std::string_view text;
};
using output_sink = std::function<void(const output_line&)>;

// The default sink: "[name] text\n" in one write(2) to out_fd (child stdout) or err_fd (stderr),
// so lines of different children never mix, even with other writers on the same terminal.
output_sink line_writer(int out_fd = 1, int err_fd = 2);

struct supervisor_options {
  output_sink sink = line_writer();
  // Longest line kept whole; longer ones are split. Bounds the memory a chatty child can take.
  size_t max_line_bytes = 4096;
  // Recent complete lines kept per child, so that wait_for_line finds a line that arrived while
  // the supervisor was waiting for something else.
  size_t kept_lines = 64;
  std::chrono::milliseconds destructor_grace{3000};
};

class supervisor {
 public:
  using child_id = size_t;

  explicit supervisor(supervisor_options options = {});
  // stop_all(options.destructor_grace): no child outlives its supervisor.
  ~supervisor();
  supervisor(const supervisor&) = delete;
  supervisor& operator=(const supervisor&) = delete;

  // Starts a child with stdin on /dev/null and stdout/stderr on pipes to this supervisor, in the
  // supervisor's process group, with PR_SET_PDEATHSIG(SIGTERM). Throws std::runtime_error if the
  // program cannot be executed (the child's execve errno is reported back before start returns).
  child_id start(child_spec spec);

  pid_t pid(child_id id) const;
  const std::string& name(child_id id) const;
  // The process group of every child (and of their children); 0 before the first start.
  pid_t process_group() const { return group_; }
  size_t size() const { return children_.size(); }

  // The child's status once it has ended and been reaped; nullopt while it runs.
  std::optional<exit_status> status(child_id id) const;
  bool running(child_id id) const { return !status(id).has_value(); }

  // Pumps output until a line of `id` containing `text` arrives (or is among the kept lines) and
  // returns it. nullopt on timeout, when the child's output has ended without it, or when a stop
  // was requested (core::stop_requested()).
  std::optional<std::string> wait_for_line(child_id id, std::string_view text,
                                           std::chrono::milliseconds timeout);
  // Pumps output until `id` has ended. nullopt on timeout or when a stop was requested.
  std::optional<exit_status> wait_exit(child_id id, std::chrono::milliseconds timeout);
  // As wait_exit, but goes on after a stop request: for the orderly stop that follows one (let
  // the initiator end its session, then its servers end theirs). nullopt on timeout only.
  std::optional<exit_status> wait_exit_while_stopping(child_id id,
                                                      std::chrono::milliseconds timeout);
  // Sends `signo` to this child alone (not its group), e.g. to forward a Ctrl-C to the one
  // child that knows how to end the session. False when it has already ended.
  bool signal(child_id id, int signo);
  // Pumps output until any child has ended and returns the first that did (lowest id); nullopt on
  // timeout, stop request, or when there is no running child. The launcher's main loop.
  std::optional<child_id> wait_any_exit(std::chrono::milliseconds timeout);

  // SIGTERM to the process group (every child and grandchild), up to `grace` for them to end,
  // then SIGKILL to whatever is left; reaps every child and flushes their output. Bounded:
  // returns within about grace + 2 s even if a process cannot be killed. Ignores stop requests
  // (it is what a stop request leads to). Safe to call again.
  void stop_all(std::chrono::milliseconds grace);

 private:
  struct child;
  enum class pump_mode { honour_stop, ignore_stop };
  // One poll(2) over every pipe, pidfd and the stop fd, at most `timeout`; handles what is ready.
  // False when a stop was requested (in honour_stop mode).
  bool pump(std::chrono::milliseconds timeout, pump_mode mode);
  std::optional<exit_status> wait_exit(child_id id, std::chrono::milliseconds timeout,
                                       pump_mode mode);
  void read_pipe(child& c, int stream_index);
  void emit(child& c, int stream_index, std::string_view text);
  void reap(child& c);
  void flush_and_close(child& c);
  bool group_alive() const;
  void drain_output(std::chrono::milliseconds bound);

  supervisor_options options_;
  std::vector<std::unique_ptr<child>> children_;
  pid_t group_ = 0;
  std::vector<char> read_buffer_;
};

}  // namespace zc::local
