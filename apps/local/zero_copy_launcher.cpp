#include "zero_copy_launcher.hpp"

#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "channel_name.hpp"
#include "core/thread.hpp"
#include "ports.hpp"

namespace zc::local {
namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often the main loop looks up from wait_any_exit; stops wake it at once anyway.
constexpr milliseconds main_loop_slice{1000};
// After a child's output has ended without the awaited line: how long to wait for its status.
constexpr milliseconds exit_status_bound{2000};
// A serving front end that ends is started again after a pause that doubles, from the first to
// the longest, while it keeps ending; one that ran this long before ending starts the count over.
constexpr milliseconds restart_pause_first{1000};
constexpr milliseconds restart_pause_longest{30000};
constexpr milliseconds restart_settled{60000};
// The exit status of a program that refused its command line: starting it again cannot help.
constexpr int usage_error_code = 2;

volatile sig_atomic_t stop_signal = 0;
struct sigaction previous_action[2];

void remember_signal(int signo) {
  if (stop_signal == 0) stop_signal = signo;
  const struct sigaction& previous = previous_action[signo == SIGINT ? 0 : 1];
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) previous.sa_handler(signo);
}

void note(const std::string& text) {
  launcher_note(text);
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

bool executable(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

std::optional<uint64_t> file_size(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return static_cast<uint64_t>(st.st_size);
}

milliseconds left_until(clock::time_point deadline) {
  return std::max(milliseconds(0),
                  std::chrono::duration_cast<milliseconds>(deadline - clock::now()));
}

long seconds(milliseconds d) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(d).count());
}

}  // namespace

void launcher_note(const std::string& text) {
  std::string line = fmt::format("{}: {}\n", program_name, text);
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

std::optional<int> prepare_backing_dir(const std::string& dir) {
  if (dir.empty()) return std::nullopt;
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::is_directory(st)) return std::nullopt;
  if (fs::exists(st)) {
    launcher_note(fmt::format("--backing-dir {}: not a folder", dir));
    return 2;
  }
  fs::create_directories(dir, ec);
  if (ec) {
    launcher_note(fmt::format("--backing-dir {}: cannot make the folder: {}", dir, ec.message()));
    return 1;
  }
  launcher_note(fmt::format("made the folder {} for the targets' blocks (--backing-dir)", dir));
  return std::nullopt;
}

int launcher_stop_signal() {
  return stop_signal != 0 ? static_cast<int>(stop_signal) : SIGTERM;
}

void install_launcher_signal_handlers() {
  core::install_stop_signal_handlers();
  struct sigaction sa {};
  sa.sa_handler = remember_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &previous_action[0]);
  sigaction(SIGTERM, &sa, &previous_action[1]);
  // A closed terminal or pipe must not kill the launcher before it has stopped its children.
  ::signal(SIGPIPE, SIG_IGN);
}

std::optional<std::string> find_program(const std::string& program, const std::string& bin_dir) {
  if (!bin_dir.empty()) {
    fs::path candidate = fs::path(bin_dir) / program;
    if (executable(candidate)) return candidate.string();
    return std::nullopt;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path here = self.parent_path();
    const std::string folder = program.substr(program.find('_') + 1);
    for (const fs::path& candidate : {here / program, here.parent_path() / folder / program})
      if (executable(candidate)) return candidate.lexically_normal().string();
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "";
  size_t begin = 0;
  while (begin < dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    fs::path candidate = fs::path(dirs.substr(begin, end - begin)) / program;
    if (end > begin && executable(candidate)) return candidate.string();
    begin = end + 1;
  }
  return std::nullopt;
}

bool find_named_programs(const std::vector<std::pair<const char*, std::string*>>& wanted,
                         const std::string& bin_dir) {
  for (auto [name, slot] : wanted) {
    auto found = find_program(name, bin_dir);
    if (!found) {
      note(bin_dir.empty()
               ? fmt::format("cannot find {} (looked next to {}, in its build tree and in PATH; "
                             "--bin-dir names the folder)",
                             name, program_name)
               : fmt::format("cannot find {} in --bin-dir {}", name, bin_dir));
      return false;
    }
    *slot = *found;
  }
  return true;
}

std::optional<zero_copy_programs> find_programs(const std::string& bin_dir) {
  zero_copy_programs programs;
  if (!find_named_programs({{target_program, &programs.target},
                            {service_program, &programs.service},
                            {initiator_program, &programs.initiator}},
                           bin_dir))
    return std::nullopt;
  return programs;
}

std::vector<uint32_t> usable_cpus() {
  std::vector<uint32_t> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (uint32_t cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  if (cpus.empty())
    for (uint32_t cpu = 0; cpu < std::max(1u, std::thread::hardware_concurrency()); ++cpu)
      cpus.push_back(cpu);
  return cpus;
}

output_sink name_bar_writer(int out_fd, int err_fd) {
  return [out_fd, err_fd](const output_line& line) {
    std::string text;
    text.reserve(line.child.size() + line.text.size() + 4);
    text.append(line.child).append(" | ").append(line.text).append("\n");
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

int run_pipeline(const std::vector<pipeline_stage>& stages, uint32_t control_timeout_seconds,
                 const launcher_bounds& bounds, output_sink sink) {
  supervisor_options supervision;
  supervision.sink = std::move(sink);
  supervision.destructor_grace = bounds.stop_grace;
  supervisor sup(std::move(supervision));
  const bool serving = !stages.empty() && stages.back().restart;

  auto fail = [&](const std::string& why) {
    note(why);
    sup.stop_all(bounds.stop_grace);
    return 1;
  };
  // The servers end on their own once the initiator has: it may wait this long for their
  // answers.
  const milliseconds wind_down = bounds.wind_down + std::chrono::seconds(control_timeout_seconds);
  std::vector<supervisor::child_id> started;  // in start order, the initiator last
  auto interrupted = [&] {
    const int signo = stop_signal != 0 ? static_cast<int>(stop_signal) : SIGTERM;
    note(fmt::format("stopping the pipeline ({})", strsignal(signo)));
    // A running initiator gets the signal alone: it drains its IOs, prints its stats and ends
    // the session in order, and then the servers end theirs and print their stats. What has
    // not ended by then is stopped (a second Ctrl-C ends zcstore_local at once, and
    // PR_SET_PDEATHSIG its children).
    // Servers that keep serving (behind zcstore_nbd) do not end on their own: each is asked to,
    // once what stands in front of it has ended.
    if (started.size() == stages.size() && sup.signal(started.back(), signo)) {
      const auto deadline = clock::now() + wind_down;
      for (auto it = started.rbegin(); it != started.rend(); ++it) {
        if (serving && it != started.rbegin()) sup.signal(*it, SIGTERM);
        if (!sup.wait_exit_while_stopping(*it, left_until(deadline))) {
          note(fmt::format("{} did not end within {} s of the stop", sup.name(*it),
                           seconds(wind_down)));
          break;
        }
      }
    }
    sup.stop_all(bounds.stop_grace);
    return 128 + signo;
  };
  auto start = [&](const std::string& name,
                   std::vector<std::string> argv) -> std::optional<supervisor::child_id> {
    const std::string command = join(argv);
    try {
      auto id = sup.start({.name = name, .argv = std::move(argv), .env = {}});
      started.push_back(id);
      note(fmt::format("started {} (pid {}): {}", name, sup.pid(id), command));
      return std::optional(id);
    } catch (const std::exception& e) {
      note(e.what());
      return std::nullopt;
    }
  };
  // The awaited line did not come: the child ended, a stop came, or the bound passed.
  auto not_ready = [&](supervisor::child_id id, const std::string& what) {
    if (core::stop_requested()) return interrupted();
    if (auto status = sup.wait_exit(id, exit_status_bound))
      return fail(
          fmt::format("{} exited before it was ready ({})", sup.name(id), status->describe()));
    if (core::stop_requested()) return interrupted();
    return fail(
        fmt::format("{} did not report {} within {} s", sup.name(id), what, seconds(bounds.start)));
  };

  std::vector<uint16_t> ports;
  std::optional<supervisor::child_id> initiator;
  for (const pipeline_stage& stage : stages) {
    auto id = start(stage.name, stage.argv(ports));
    if (!id) return fail(fmt::format("the {} could not be started", stage.name));
    if (stage.awaited == pipeline_stage::ready::port) {
      auto line = sup.wait_for_line(*id, listening_line_text, bounds.start);
      if (!line) return not_ready(*id, "its port");
      auto port = parse_listening_port(*line);
      if (!port) return fail(fmt::format("{}: no port in \"{}\"", stage.name, *line));
      ports.push_back(*port);
    } else if (stage.awaited == pipeline_stage::ready::channel) {
      if (!sup.wait_for_line(*id, channel_listening_text, bounds.start))
        return not_ready(*id, "its channel");
    } else {
      initiator = id;
    }
  }
  if (!initiator) return fail("no initiator in the pipeline");

  // A serving front end (zcstore_nbd) runs until a stop; its servers keep serving
  // (--keep-serving), so one that ends is started again in its place while they stay up. A
  // server that ends is a failure, as is a front end that refused its command line.
  if (serving) {
    milliseconds pause = restart_pause_first;
    auto front_started = clock::now();
    for (;;) {
      auto ended = sup.wait_any_exit(main_loop_slice);
      if (core::stop_requested()) return interrupted();
      if (!ended) continue;
      const exit_status status = *sup.status(*ended);
      if (*ended != *initiator)
        return fail(
            fmt::format("{} ended while serving ({})", sup.name(*ended), status.describe()));
      if (status.shell_code() == usage_error_code) {
        fail(fmt::format("{} refused its command line ({})", sup.name(*ended), status.describe()));
        return usage_error_code;
      }
      if (clock::now() - front_started >= restart_settled) pause = restart_pause_first;
      note(fmt::format("{} ended ({}); starting it again in {} s", sup.name(*ended),
                       status.describe(), seconds(pause)));
      // The pause goes on relaying the servers' output, and sees one of them end.
      if (auto server = sup.wait_any_exit(pause))
        return fail(fmt::format("{} ended while serving ({})", sup.name(*server),
                                sup.status(*server)->describe()));
      if (core::stop_requested()) return interrupted();
      started.pop_back();
      initiator = start(stages.back().name, stages.back().argv(ports));
      if (!initiator) return fail(fmt::format("the {} could not be started", stages.back().name));
      front_started = clock::now();
      pause = std::min(pause * 2, restart_pause_longest);
    }
  }

  // The initiator decides how long the run takes: wait for it without a bound, but stop at
  // once when a server fails under it.
  std::optional<exit_status> result;
  while (!result) {
    auto ended = sup.wait_any_exit(main_loop_slice);
    if (core::stop_requested()) return interrupted();
    if (!ended) continue;
    if (*ended == *initiator) {
      result = sup.status(*initiator);
      break;
    }
    const exit_status status = *sup.status(*ended);
    if (status.shell_code() != 0)
      return fail(fmt::format("{} failed while the initiator was running ({})", sup.name(*ended),
                              status.describe()));
    // A clean exit: the session is over, so the initiator is finishing too.
    result = sup.wait_exit(*initiator, wind_down);
    if (core::stop_requested()) return interrupted();
    if (!result)
      return fail(fmt::format("{} ended ({}) but the initiator did not end within {} s",
                              sup.name(*ended), status.describe(), seconds(wind_down)));
  }
  if (result->shell_code() != 0) {
    note(fmt::format("initiator failed ({})", result->describe()));
    sup.stop_all(bounds.stop_grace);
    return result->shell_code();
  }

  // The initiator's stop ends the service's session, and the service's shutdown the targets':
  // they end on their own within wind_down, and anything else is a failure the user must see.
  const auto deadline = clock::now() + wind_down;
  for (auto it = started.rbegin() + 1; it != started.rend(); ++it) {
    auto status = sup.wait_exit(*it, left_until(deadline));
    if (core::stop_requested()) return interrupted();
    if (!status)
      return fail(fmt::format("{} did not exit within {} s after the initiator finished",
                              sup.name(*it), seconds(wind_down)));
    if (status->shell_code() != 0)
      return fail(fmt::format("{} failed after the initiator finished ({})", sup.name(*it),
                              status->describe()));
  }
  sup.stop_all(bounds.stop_grace);
  return 0;
}

int run_zero_copy(const zero_copy_options& options, const zero_copy_programs& programs,
                  const launcher_bounds& bounds, output_sink sink) {
  if (const auto refused = prepare_backing_dir(options.backing_dir)) return *refused;
  const std::vector<uint32_t> cores = usable_cpus();
  const std::string channel = unique_channel_name("zcstore_local");
  std::vector<pipeline_stage> stages{
      {.name = "target",
       .argv =
           [&](const std::vector<uint16_t>&) {
             return target_argv(options, programs.target, file_size(options.content), cores);
           },
       .awaited = pipeline_stage::ready::port},
      {.name = "service",
       .argv =
           [&](const std::vector<uint16_t>& ports) {
             return service_argv(options, programs.service, channel, ports.at(0), cores);
           },
       .awaited = pipeline_stage::ready::channel},
      {.name = options.nbd_socket.empty() ? "initiator" : "nbd",
       .argv =
           [&](const std::vector<uint16_t>&) {
             return options.nbd_socket.empty()
                        ? initiator_argv(options, programs.initiator, channel, cores)
                        : nbd_argv(options, programs.nbd, channel, cores);
           },
       .awaited = pipeline_stage::ready::none,
       .restart = !options.nbd_socket.empty()},
  };
  return run_pipeline(stages, options.control_timeout_seconds, bounds, std::move(sink));
}

}  // namespace zc::local
