#include "zero_copy_plan.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>
#include <limits>

#include "core/cli.hpp"

namespace zc::local {
namespace {

constexpr uint32_t max_workers = 1024;
// The flag that ties the service and the initiator together: the launcher owns it.
constexpr std::string_view channel_flag = "--command-channel-name";

// core::poll_mode as the programs' --poll-mode spells it.
std::string poll_mode_name(core::poll_mode mode) {
  switch (mode) {
    case core::poll_mode::busy:
      return "busy";
    case core::poll_mode::event:
      return "event";
    case core::poll_mode::adaptive:
      break;
  }
  return "adaptive";
}

// Adds "flag value" unless the initiator's own words after "--" set it.
void add_default(std::vector<std::string>& argv, const zero_copy_options& options,
                 std::string_view flag, std::string value, std::string_view short_flag = {}) {
  if (has_flag(options.initiator_words, flag, short_flag)) return;
  argv.emplace_back(flag);
  argv.push_back(std::move(value));
}

int bad_usage(const std::string& problem) {
  std::cerr << program_name << " zero-copy: " << problem << " (see --help)\n";
  return core::exit_bad_usage;
}

}  // namespace

parse_result parse_zero_copy_options(const std::vector<std::string>& words) {
  parse_result result;
  zero_copy_options& out = result.options;
  auto split = std::find(words.begin(), words.end(), "--");
  if (split != words.end()) out.initiator_words.assign(split + 1, words.end());

  core::cli cli(std::string(program_name) + " zero-copy",
                "Runs the zero-copy pipeline on this machine: a RAM target, the zero-copy service "
                "and an initiator, with their output prefixed by their names. Words after \"--\" "
                "go to the initiator (zcstore_initiator_comch) and override the defaults below.");
  auto& app = cli.app();
  app.footer(
      "Usage: zcstore_local zero-copy [OPTIONS] [-- initiator flags]\n"
      "Initiator defaults (unless given after --): --execution-strategy read_throughput_test, "
      "--run-limit-operation-count 100000, --cpu from --workers, and --device, --poll-mode, "
      "--control-timeout and --storage-plain-content (--content) from these options.");
  auto* size_option =
      app.add_option("--target-size", out.target_size,
                     "Target capacity in bytes, a multiple of --block-size (suffixes: KiB, MiB, "
                     "GiB); default 64 MiB, or the size of --content")
          ->transform(CLI::AsSizeValue(false));
  app.add_option("--block-size", out.block_size, "Target block size in bytes")
      ->check(CLI::Range(1u, std::numeric_limits<uint32_t>::max()))
      ->capture_default_str();
  app.add_option("--content", out.content,
                 "Initial target content (.sbc or raw file); also the initiator's "
                 "--storage-plain-content unless given after --");
  add_shared_options(app, out,
                     "Network device for all three: auto, tcp, sm, interface, RDMA device");
  if (auto code = parse_own_words(cli, words, split, out)) {
    result.exit_code = code;
    return result;
  }
  out.target_size_given = size_option->count() > 0;

  if (out.target_size_given) {
    if (out.target_size == 0 || out.target_size % out.block_size != 0) {
      result.exit_code =
          bad_usage(fmt::format("--target-size {} is not a non-zero multiple of --block-size {}",
                                out.target_size, out.block_size));
      return result;
    }
    if (out.target_size / out.block_size > std::numeric_limits<uint32_t>::max()) {
      result.exit_code = bad_usage(
          fmt::format("--target-size {} needs more than {} blocks of {} bytes", out.target_size,
                      std::numeric_limits<uint32_t>::max(), out.block_size));
      return result;
    }
  }
  if (has_flag(out.initiator_words, channel_flag)) {
    result.exit_code = bad_usage(
        fmt::format("{} is chosen by {} (a unique name per run) and cannot be given after --",
                    channel_flag, program_name));
    return result;
  }
  if (auto code = cli.check_device(out.device)) result.exit_code = code;
  return result;
}

void add_log_levels(std::vector<std::string>& argv, const zero_copy_options& options,
                    const std::vector<std::string>& own_words) {
  if (options.log_level && !has_flag(own_words, "--log-level", "-l"))
    argv.insert(argv.end(), {"--log-level", std::to_string(*options.log_level)});
  if (options.sdk_log_level && !has_flag(own_words, "--sdk-log-level"))
    argv.insert(argv.end(), {"--sdk-log-level", std::to_string(*options.sdk_log_level)});
}

void add_keep_serving(std::vector<std::string>& argv, const zero_copy_options& options) {
  if (!options.nbd_socket.empty()) argv.emplace_back("--keep-serving");
}

void add_cpus(std::vector<std::string>& argv, uint32_t count, const std::vector<uint32_t>& cores) {
  for (uint32_t cpu : round_robin_cpus(count, cores)) {
    argv.emplace_back("--cpu");
    argv.push_back(std::to_string(cpu));
  }
}

std::vector<uint32_t> round_robin_cpus(uint32_t count, const std::vector<uint32_t>& cores) {
  std::vector<uint32_t> cpus;
  for (uint32_t i = 0; i < count; ++i) cpus.push_back(cores.empty() ? 0 : cores[i % cores.size()]);
  return cpus;
}

bool has_flag(const std::vector<std::string>& words, std::string_view flag,
              std::string_view short_flag) {
  for (std::string_view word : words) {
    if (word == flag || (!short_flag.empty() && word == short_flag)) return true;
    if (word.size() > flag.size() && word.substr(0, flag.size()) == flag &&
        word[flag.size()] == '=')
      return true;
    // "-dauto": a short flag with its value attached.
    if (!short_flag.empty() && word.size() > short_flag.size() &&
        word.substr(0, short_flag.size()) == short_flag && short_flag.size() == 2)
      return true;
  }
  return false;
}

uint64_t target_block_count(const zero_copy_options& options,
                            std::optional<uint64_t> content_size) {
  if (!options.target_size_given && !options.content.empty() && content_size &&
      *content_size >= options.block_size)
    return *content_size / options.block_size;
  return options.target_size / options.block_size;
}

std::vector<std::string> target_argv(const zero_copy_options& options, const std::string& program,
                                     std::optional<uint64_t> content_size,
                                     const std::vector<uint32_t>& cores) {
  std::vector<std::string> argv{program, "-d", options.device};
  add_cpus(argv, options.workers, cores);
  // Port 0: the target binds any free port and logs "listening on port N", so two launchers on
  // one machine never race for a port. Loopback only: its service is on this machine, and no one
  // elsewhere may reach the storage.
  argv.insert(argv.end(), {"--listen-address", "127.0.0.1", "--listen-port", "0", "--block-size",
                           std::to_string(options.block_size), "--block-count",
                           std::to_string(target_block_count(options, content_size))});
  if (!options.content.empty()) argv.insert(argv.end(), {"--binary-content", options.content});
  add_backing_file(argv, options, 0);
  argv.insert(argv.end(), {"--poll-mode", options.poll_mode});
  add_keep_serving(argv, options);
  add_log_levels(argv, options, {});
  return argv;
}

std::vector<std::string> service_argv(const zero_copy_options& options, const std::string& program,
                                      const std::string& channel, uint16_t target_port,
                                      const std::vector<uint32_t>& cores) {
  std::vector<std::string> argv{program, "-d", options.device, "-r", representor_label};
  add_cpus(argv, initiator_worker_count(options), cores);
  argv.insert(argv.end(),
              {"--storage-server", fmt::format("127.0.0.1:{}", target_port),
               std::string(channel_flag), channel, "--control-timeout",
               std::to_string(options.control_timeout_seconds), "--poll-mode", options.poll_mode});
  add_keep_serving(argv, options);
  add_log_levels(argv, options, {});
  return argv;
}

void add_shared_options(CLI::App& app, zero_copy_options& out, const std::string& device_help) {
  app.add_option(
         "--workers", out.workers,
         "Worker threads of each program, pinned round robin to the cores zcstore_local may use")
      ->check(CLI::Range(1u, max_workers))
      ->capture_default_str();
  app.add_option("--control-timeout", out.control_timeout_seconds,
                 "Seconds the service and initiator wait for each control step")
      ->check(CLI::Range(1u, 3600u))
      ->capture_default_str();
  app.add_option("-d,--device", out.device, device_help)->capture_default_str();
  app.add_option("--bin-dir", out.bin_dir,
                 "Folder of the zcstore programs (default: next to zcstore_local, its build tree, "
                 "then PATH)");
  app.add_option("--nbd", out.nbd_socket,
                 "Serve the pipeline over NBD on this Unix socket (zcstore_nbd instead of the "
                 "initiator; the words after -- are then zcstore_nbd's) until Ctrl-C");
  app.add_option("--backing-dir", out.backing_dir,
                 "Folder where target N keeps its blocks in target-N.img (a later start with the "
                 "same folder serves the same disk)");
}

std::optional<int> parse_own_words(core::cli& cli, const std::vector<std::string>& words,
                                   std::vector<std::string>::const_iterator split,
                                   zero_copy_options& out) {
  std::vector<const char*> argv{program_name};
  for (auto w = words.begin(); w != split; ++w) argv.push_back(w->c_str());
  if (auto code = cli.parse(static_cast<int>(argv.size()), argv.data())) return code;
  out.poll_mode = poll_mode_name(cli.polling());
  for (auto [flag, slot] :
       {std::pair{"--log-level", &out.log_level}, std::pair{"--sdk-log-level", &out.sdk_log_level}})
    if (const CLI::Option* option = cli.app().get_option(flag); option->count() > 0)
      *slot = option->as<int>();
  return std::nullopt;
}

std::string backing_file(const zero_copy_options& options, uint32_t target) {
  if (options.backing_dir.empty()) return {};
  return fmt::format("{}/target-{}.img", options.backing_dir, target);
}

void add_backing_file(std::vector<std::string>& argv, const zero_copy_options& options,
                      uint32_t target) {
  if (!options.backing_dir.empty())
    argv.insert(argv.end(), {"--backing-file", backing_file(options, target)});
}

std::vector<std::string> nbd_argv(const zero_copy_options& options, const std::string& program,
                                  const std::string& channel, const std::vector<uint32_t>& cores) {
  std::vector<std::string> argv{program, std::string(channel_flag), channel, "--socket",
                                options.nbd_socket};
  add_default(argv, options, "--device", options.device, "-d");
  if (!has_flag(options.initiator_words, "--cpu")) add_cpus(argv, options.workers, cores);
  add_default(argv, options, "--control-timeout", std::to_string(options.control_timeout_seconds));
  add_default(argv, options, "--poll-mode", options.poll_mode);
  add_log_levels(argv, options, options.initiator_words);
  argv.insert(argv.end(), options.initiator_words.begin(), options.initiator_words.end());
  return argv;
}

uint32_t initiator_worker_count(const zero_copy_options& options) {
  uint32_t given = 0;
  for (size_t i = 0; i < options.initiator_words.size(); ++i) {
    std::string_view word = options.initiator_words[i];
    if (word == "--cpu" || word.substr(0, 6) == "--cpu=") ++given;
  }
  return given != 0 ? given : options.workers;
}

std::vector<std::string> initiator_argv(const zero_copy_options& options,
                                        const std::string& program, const std::string& channel,
                                        const std::vector<uint32_t>& cores) {
  std::vector<std::string> argv{program, std::string(channel_flag), channel};
  add_default(argv, options, "--device", options.device, "-d");
  if (!has_flag(options.initiator_words, "--cpu")) add_cpus(argv, options.workers, cores);
  add_default(argv, options, "--execution-strategy", options.execution_strategy);
  add_default(argv, options, "--run-limit-operation-count",
              std::to_string(options.run_limit_operation_count));
  if (!options.content.empty())
    add_default(argv, options, "--storage-plain-content", options.content);
  add_default(argv, options, "--control-timeout", std::to_string(options.control_timeout_seconds));
  add_default(argv, options, "--poll-mode", options.poll_mode);
  if (options.terminal && !has_flag(options.initiator_words, "--progress") &&
      !has_flag(options.initiator_words, "--no-progress"))
    argv.emplace_back("--progress");
  add_log_levels(argv, options, options.initiator_words);
  argv.insert(argv.end(), options.initiator_words.begin(), options.initiator_words.end());
  return argv;
}

}  // namespace zc::local
