// Runs `zcstore_local zero-copy`: starts the target, waits for its port, starts the service,
// waits for its channel, starts the initiator, relays every line as "<name> | text", and stops
// every child on the way out. Control path; call from the main thread only (the thread that
// starts children must outlive them: PR_SET_PDEATHSIG, see supervisor.hpp).
//
//   zc::local::install_launcher_signal_handlers();
//   auto programs = zc::local::find_programs(options.bin_dir);
//   if (!programs) return 1;
//   return zc::local::run_zero_copy(options, *programs);
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "supervisor.hpp"
#include "zero_copy_plan.hpp"

namespace zc::local {

inline constexpr const char* target_program = "zcstore_target_rdma";
inline constexpr const char* service_program = "zcstore_comch_to_rdma_zero_copy";
inline constexpr const char* initiator_program = "zcstore_initiator_comch";
inline constexpr const char* nbd_program = "zcstore_nbd";

// What the service logs once its comch server is up.
inline constexpr std::string_view channel_listening_text = "listening on channel";

struct zero_copy_programs {
  std::string target, service, initiator;
  std::string nbd;  // found only for --nbd
};

// Where `program` is: in `bin_dir` when one is given (nullopt if not there); else next to this
// executable, then in this executable's build tree (build/<kind>/apps/<folder>/zcstore_<folder>),
// then in PATH.
std::optional<std::string> find_program(const std::string& program, const std::string& bin_dir);

// The three programs, or nullopt after printing which one is missing and where it was looked for.
std::optional<zero_copy_programs> find_programs(const std::string& bin_dir);

// Finds each named program (find_program) into its slot; false after printing which one is
// missing and where it was looked for.
bool find_named_programs(const std::vector<std::pair<const char*, std::string*>>& wanted,
                         const std::string& bin_dir);

// The cores this process may run on (its affinity mask: taskset, a container's cpuset), in
// ascending order; 0 .. hardware_concurrency - 1 when the mask cannot be read. The children are
// pinned to these, since pinning to a core outside the mask fails.
std::vector<uint32_t> usable_cpus();

// The sink zcstore_local uses: "<name> | text\n" in one write(2), to out_fd for a child's stdout
// and err_fd for its stderr, so a line is never mixed with another.
output_sink name_bar_writer(int out_fd = 1, int err_fd = 2);

// "zcstore_local: text" on stderr in one write(2): the launcher's own lines.
void launcher_note(const std::string& text);

// --backing-dir DIR, before anything starts: made with its parents when it does not exist yet
// (and said so). nullopt when it is ready (or not given), else the exit status after a one-line
// reason: 2 for a path that is not a folder, 1 when it cannot be made.
std::optional<int> prepare_backing_dir(const std::string& dir);

struct launcher_bounds {
  // For the target's "listening on port" and the service's "listening on channel" lines.
  std::chrono::milliseconds start = std::chrono::seconds(30);
  // For the service and target to end on their own once the initiator has finished, and for
  // all three to end in order after a Ctrl-C (added to the control timeout: the service may
  // wait that long for the target's answers).
  std::chrono::milliseconds wind_down = std::chrono::seconds(10);
  // SIGTERM to SIGKILL when stopping the children.
  std::chrono::milliseconds stop_grace = std::chrono::seconds(5);
  // For a step that runs to its end before the pipeline starts (gga's sbc generator).
  std::chrono::milliseconds prepare = std::chrono::seconds(120);
};

// One program of a pipeline, in start order. Servers report they are ready with a line; the
// last stage is the initiator, which decides how long the run takes.
struct pipeline_stage {
  enum class ready { port, channel, none };
  std::string name;  // its output prefix
  // Its command line, given the ports the servers started before it reported (in start order).
  std::function<std::vector<std::string>(const std::vector<uint16_t>& ports)> argv;
  ready awaited = ready::none;  // port: "listening on port N"; channel: channel_listening_text
  // The last stage only: a daemon in front of servers that keep serving (zcstore_nbd), started
  // again whenever it ends until the launcher is stopped.
  bool restart = false;
};

// Starts `stages` in order, each once the one before is ready, and runs them as run_zero_copy
// describes (the initiator is the last stage; the others end on their own after it, in reverse
// start order, within wind_down + control_timeout_seconds). A last stage that `restart`s serves
// until a stop instead: it is started again whenever it ends (after 1 s, doubling up to 30 s
// while it keeps ending; exit 2, a refused command line, ends the launcher), and a stop ends it
// first and then asks each server in turn. Shared by the pipelines.
int run_pipeline(const std::vector<pipeline_stage>& stages, uint32_t control_timeout_seconds,
                 const launcher_bounds& bounds, output_sink sink);

// core::install_stop_signal_handlers(), plus: remembers which signal asked for the stop (the exit
// status is 128 + signal) and ignores SIGPIPE (a closed terminal must not kill the launcher
// before it has stopped its children). A second Ctrl-C still kills it; PDEATHSIG then stops
// the children.
void install_launcher_signal_handlers();
// The signal that asked for the stop (SIGTERM when none was remembered).
int launcher_stop_signal();

// Runs the pipeline and returns zcstore_local's exit status: the initiator's; 1 when another
// child failed or did not end; 128 + signal after SIGINT/SIGTERM (see
// install_launcher_signal_handlers), which is forwarded to a running initiator alone so that
// the session ends in order, bounded by wind_down. Nothing is left running.
int run_zero_copy(const zero_copy_options& options, const zero_copy_programs& programs,
                  const launcher_bounds& bounds = {}, output_sink sink = name_bar_writer());

}  // namespace zc::local
