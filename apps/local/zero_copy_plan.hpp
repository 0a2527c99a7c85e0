// `zcstore_local zero-copy`: its options, and the command lines of the three programs it starts
// (target, zero-copy service, initiator), as pure functions so that tests need no process.
// Control path only; not thread-safe.
//
//   auto parsed = zc::local::parse_zero_copy_options(words);   // the words after "zero-copy"
//   if (parsed.exit_code) return *parsed.exit_code;
//   auto argv = zc::local::target_argv(parsed.options, target_path, content_size, cores);
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cli.hpp"

namespace zc::local {

inline constexpr const char* program_name = "zcstore_local";

inline constexpr uint64_t default_target_size = 64ull << 20;
inline constexpr uint32_t default_block_size = 4096;
inline constexpr const char* default_execution_strategy = "read_throughput_test";
inline constexpr uint64_t default_run_limit_operation_count = 100'000;
// The service's -r (the reference's host representor): its comch server answers for this host
// function, and an initiator's client tries its own -d and then "auto", so "auto" meets an
// initiator whatever device it is given.
inline constexpr const char* representor_label = "auto";

struct zero_copy_options {
  uint64_t target_size = default_target_size;  // bytes; a multiple of block_size
  bool target_size_given = false;              // else a --content file decides the size
  uint32_t block_size = default_block_size;
  std::string content;  // target --binary-content, initiator --storage-plain-content
  uint32_t workers = 1;
  std::string poll_mode = "adaptive";
  uint32_t control_timeout_seconds = 5;
  std::string device = "auto";
  std::string bin_dir;  // empty: next to zcstore_local, then PATH
  // -l/--log-level and --sdk-log-level as given to zcstore_local: passed on to all three.
  std::optional<int> log_level, sdk_log_level;
  std::vector<std::string> initiator_words;  // after "--", passed to the initiator last
  // The initiator's defaults (zcstore_local gga sets its own).
  std::string execution_strategy = default_execution_strategy;
  uint64_t run_limit_operation_count = default_run_limit_operation_count;
  // zcstore_local's stderr is a terminal: the initiator, which sees a pipe, is asked for its
  // once-a-second progress lines (unless --progress or --no-progress comes after "--").
  bool terminal = false;
  // --nbd SOCKET: zcstore_nbd serves the pipeline there instead of the initiator (and gets the
  // words after "--"), until Ctrl-C.
  std::string nbd_socket;
  // --backing-dir DIR: target N keeps its blocks in DIR/target-N.img (created, or reopened by a
  // later start).
  std::string backing_dir;
};

struct parse_result {
  zero_copy_options options;
  // Set when the program must stop now: 0 after --help, 2 after a bad command line (one line on
  // stderr naming the problem).
  std::optional<int> exit_code;
};

// Parses the words after "zero-copy". Everything after the first "--" is the initiator's.
parse_result parse_zero_copy_options(const std::vector<std::string>& words);

// Workers' cores: `count` of them taken round robin from `cores` (the cores zcstore_local may
// use, see usable_cpus()): round_robin_cpus(3, {2, 5}) == {2, 5, 2}. Core 0 when `cores` is empty.
std::vector<uint32_t> round_robin_cpus(uint32_t count, const std::vector<uint32_t>& cores);

// True when `words` hold `flag` ("--cpu 1" or "--cpu=1"), or its short form `short_flag`.
bool has_flag(const std::vector<std::string>& words, std::string_view flag,
              std::string_view short_flag = {});

// The target's block count: target_size / block_size, or, when --content names a file of
// `content_size` bytes and no --target-size was given, that file's size / block_size (a .sbc
// file carries its own geometry, and the target then ignores the count).
uint64_t target_block_count(const zero_copy_options& options, std::optional<uint64_t> content_size);

std::vector<std::string> target_argv(const zero_copy_options& options, const std::string& program,
                                     std::optional<uint64_t> content_size,
                                     const std::vector<uint32_t>& cores);

// The service gets as many cores as the initiator has workers: the initiator's core count is
// what it asks the service for.
std::vector<std::string> service_argv(const zero_copy_options& options, const std::string& program,
                                      const std::string& channel, uint16_t target_port,
                                      const std::vector<uint32_t>& cores);

// The launcher's defaults, each left out when the same flag comes after "--" (the initiator
// takes the last of a repeated flag, but adds up repeated --cpu), then the words after "--".
std::vector<std::string> initiator_argv(const zero_copy_options& options,
                                        const std::string& program, const std::string& channel,
                                        const std::vector<uint32_t>& cores);

// Shared by the pipelines' command lines: the log levels zcstore_local was given, for a program
// not given its own in `own_words`; and "--cpu N" for `count` cores taken round robin.
void add_log_levels(std::vector<std::string>& argv, const zero_copy_options& options,
                    const std::vector<std::string>& own_words);
void add_cpus(std::vector<std::string>& argv, uint32_t count, const std::vector<uint32_t>& cores);
// "--keep-serving" for a server behind zcstore_nbd (--nbd): it outlives a zcstore_nbd that ends,
// so the launcher can start another in its place. Nothing for an initiator's one session.
void add_keep_serving(std::vector<std::string>& argv, const zero_copy_options& options);
// Shared by both pipelines' parsers: --workers, --control-timeout, -d/--device (`device_help`),
// --bin-dir, --nbd and --backing-dir.
void add_shared_options(CLI::App& app, zero_copy_options& out, const std::string& device_help);
// Parses zcstore_local's own words (those before `split`, the "--" or the end) with `cli`, then
// takes the poll mode and the log levels given into `out`. The exit code when parsing ends the
// program (help, version, a bad command line).
std::optional<int> parse_own_words(core::cli& cli, const std::vector<std::string>& words,
                                   std::vector<std::string>::const_iterator split,
                                   zero_copy_options& out);

// "DIR/target-N.img" for --backing-dir DIR; empty without one.
std::string backing_file(const zero_copy_options& options, uint32_t target);
// "--backing-file DIR/target-N.img" when --backing-dir was given.
void add_backing_file(std::vector<std::string>& argv, const zero_copy_options& options,
                      uint32_t target);

// zcstore_nbd in front of the service: --socket, the channel, the launcher's device, cores, poll
// mode and control timeout unless the words after "--" set them, then those words.
std::vector<std::string> nbd_argv(const zero_copy_options& options, const std::string& program,
                                  const std::string& channel, const std::vector<uint32_t>& cores);

// How many workers the initiator will run: its --cpu count after "--", else --workers.
uint32_t initiator_worker_count(const zero_copy_options& options);

}  // namespace zc::local
