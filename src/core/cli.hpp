// Command-line front end shared by every program: CLI11 for flags, plus the options all of them
// take (-h, -v, -l/--log-level, --sdk-log-level, -j/--json FILE, --poll-mode). Control path only.
//
//   zc::core::cli cli{"zcstore_target_rdma", "Memory-backed RDMA storage target"};
//   cli.app().add_option("--listen-port", port)->required();
//   if (auto exit_code = cli.parse(argc, argv)) return *exit_code;
//
// CLI11 is only declared here (it costs seconds of compile time in every file that includes it):
// a file that adds flags through app() or calls off_or_at_least() includes <CLI/CLI.hpp> itself.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/progress_engine.hpp"

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace zc::core {

// Exit status for a command line that cannot be used (bad flag, bad value, bad JSON).
inline constexpr int exit_bad_usage = 2;

class cli {
 public:
  cli(std::string program_name, std::string description);
  ~cli();
  // The app's options point into this object: neither copied nor moved.
  cli(const cli&) = delete;
  cli& operator=(const cli&) = delete;

  CLI::App& app() { return *app_; }
  const std::string& program_name() const { return program_name_; }

  // Parses the JSON file named by -j/--json (if any) and then argv on top of it: a flag given on
  // the command line wins over the same key in the file. Applies the log levels. Returns an exit
  // status when the program must stop now (0 after -h/-v; exit_bad_usage after printing one
  // line that names the problem), or nullopt to go on.
  std::optional<int> parse(int argc, const char* const* argv);

  poll_mode polling() const { return poll_mode_; }

  // A -d/--device that names nothing is a bad flag: checked at parse time (one line, then
  // exit_bad_usage), not after the program has connected or started listening.
  std::optional<int> check_device(const std::string& spec) const;

  // Turns a JSON object into command-line words: {"cpu": [0, 1], "listen-port": 1234,
  // "verbose": true} -> --cpu 0 --cpu 1 --listen-port 1234 --verbose. Throws status_error
  // (invalid_value) on anything that is not an object of scalars and arrays of scalars.
  static std::vector<std::string> json_to_args(const std::string& json_text);

 private:
  std::string without_command_line_keys(const std::string& json_text, int argc,
                                        const char* const* argv);

  std::string program_name_;
  std::unique_ptr<CLI::App> app_;
  int log_level_ = 50;
  int sdk_log_level_ = 40;
  std::string json_file_;
  poll_mode poll_mode_ = poll_mode::adaptive;
};

// A check for a non-negative whole number that is either 0 (the feature off) or at least
// `minimum`, e.g. --keep-alive-timeout: "must be 0 (off) or at least 2".
CLI::Validator off_or_at_least(uint64_t minimum);

// The reference's first line of every program: "<program>: v<version>", flushed.
void print_banner(std::string_view program, std::string_view version);

// Runs a program's body. An exception that escapes it becomes one line on stderr,
// "<program>: <what> (<status name>)", and the exit status that on_failure returns for its
// status (unknown for an exception that carries none); without on_failure, 1.
int run_guarded(std::string_view program, const std::function<int()>& body,
                const std::function<int(status)>& on_failure = {});

}  // namespace zc::core
