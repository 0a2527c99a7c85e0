#include "gga_plan.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <limits>

#include "core/cli.hpp"

namespace zc::local {
namespace {

constexpr std::string_view channel_flag = "--command-channel-name";
// The generator's rule for its --block-size.
constexpr uint32_t generator_block_multiple = 64;

int bad_usage(const std::string& problem) {
  std::cerr << program_name << " gga: " << problem << " (see --help)\n";
  return core::exit_bad_usage;
}

}  // namespace

gga_parse_result parse_gga_options(const std::vector<std::string>& words) {
  gga_parse_result result;
  gga_options& gga = result.options;
  zero_copy_options& out = gga.common;
  out.target_size = default_gga_content_size;
  out.block_size = default_gga_block_size;
  out.execution_strategy = default_gga_execution_strategy;
  out.run_limit_operation_count = default_gga_run_limit_operation_count;
  auto split = std::find(words.begin(), words.end(), "--");
  if (split != words.end()) out.initiator_words.assign(split + 1, words.end());

  core::cli cli(std::string(program_name) + " gga",
                "Runs the gga offload pipeline on this machine: the sbc generator makes three "
                "target images (data 1, data 2, parity) of a plain file, three RAM targets serve "
                "them, the gga offload service and an initiator read them back, with their output "
                "prefixed by their names. Words after \"--\" go to the initiator "
                "(zcstore_initiator_comch) and override the defaults below.");
  auto& app = cli.app();
  app.footer(
      "Usage: zcstore_local gga [OPTIONS] [-- initiator flags]\n"
      "Initiator defaults (unless given after --): --execution-strategy "
      "read_only_data_validity_test, --run-limit-operation-count 20000, --storage-plain-content "
      "the plain file, --cpu from --workers, and --device, --poll-mode and --control-timeout from "
      "these options.");
  app.add_option("--content", out.content,
                 "Plain file to store (compressible: each block's LZ4 image must fit in half a "
                 "block; its size a multiple of --block-size); default: a compressible file of "
                 "--target-size made in a temporary folder and removed afterwards");
  app.add_option("--target-size", out.target_size,
                 "Size of the generated plain file, a multiple of --block-size (suffixes: KiB, "
                 "MiB, GiB); default 16 MiB")
      ->transform(CLI::AsSizeValue(false));
  app.add_option("--block-size", out.block_size,
                 "Block size the initiator sees (the generator's --block-size, a multiple of 64); "
                 "each target holds half")
      ->capture_default_str();
  app.add_option("--matrix-type", gga.matrix_type,
                 "Erasure coding matrix of the generator and service: vandermonde or cauchy")
      ->check(CLI::IsMember({"vandermonde", "cauchy"}))
      ->capture_default_str();
  app.add_option("--recovery-every", gga.recovery_every,
                 "The service rebuilds every N-th block read from the other half and the parity "
                 "(its --trigger-recovery-read-every-n); 0: never")
      ->capture_default_str();
  add_shared_options(app, out,
                     "Network device for all programs: auto, tcp, sm, interface, RDMA device");
  if (auto code = parse_own_words(cli, words, split, out)) {
    result.exit_code = code;
    return result;
  }

  if (out.block_size == 0 || out.block_size % generator_block_multiple != 0) {
    result.exit_code = bad_usage(fmt::format("--block-size {} is not a non-zero multiple of {}",
                                             out.block_size, generator_block_multiple));
    return result;
  }
  if (out.target_size == 0 || out.target_size % out.block_size != 0) {
    result.exit_code =
        bad_usage(fmt::format("--target-size {} is not a non-zero multiple of --block-size {}",
                              out.target_size, out.block_size));
    return result;
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

gga_images gga_image_paths(const std::string& dir) {
  const std::filesystem::path d(dir);
  return {(d / "data_1.sbc").string(), (d / "data_2.sbc").string(), (d / "data_p.sbc").string()};
}

std::vector<std::string> generator_argv(const gga_options& options, const std::string& program,
                                        const std::string& plain, const gga_images& images) {
  return {program,
          "--original-input-data",
          plain,
          "--block-size",
          std::to_string(options.common.block_size),
          "--matrix-type",
          options.matrix_type,
          "--data-1",
          images.data_1,
          "--data-2",
          images.data_2,
          "--data-p",
          images.data_p};
}

std::vector<std::string> gga_target_argv(const gga_options& options, const std::string& program,
                                         const std::string& image,
                                         const std::vector<uint32_t>& cores, uint32_t index) {
  const zero_copy_options& o = options.common;
  std::vector<std::string> argv{program, "-d", o.device};
  add_cpus(argv, o.workers, cores);
  // The image carries its own geometry; port 0 and loopback only, as for zero-copy.
  argv.insert(argv.end(), {"--listen-address", "127.0.0.1", "--listen-port", "0",
                           "--binary-content", image, "--poll-mode", o.poll_mode});
  add_backing_file(argv, o, index);
  add_keep_serving(argv, o);
  add_log_levels(argv, o, {});
  return argv;
}

std::vector<std::string> gga_service_argv(const gga_options& options, const std::string& program,
                                          const std::string& channel,
                                          const std::array<uint16_t, 3>& target_ports,
                                          const std::vector<uint32_t>& cores) {
  const zero_copy_options& o = options.common;
  std::vector<std::string> argv{program, "-d", o.device, "-r", representor_label};
  add_cpus(argv, initiator_worker_count(o), cores);
  const std::array<const char*, 3> flags{"--data-1-storage", "--data-2-storage",
                                         "--data-p-storage"};
  for (size_t i = 0; i < 3; ++i)
    argv.insert(argv.end(), {flags[i], fmt::format("127.0.0.1:{}", target_ports[i])});
  argv.insert(argv.end(), {std::string(channel_flag), channel, "--control-timeout",
                           std::to_string(o.control_timeout_seconds), "--poll-mode", o.poll_mode,
                           "--matrix-type", options.matrix_type, "--trigger-recovery-read-every-n",
                           std::to_string(options.recovery_every)});
  add_keep_serving(argv, o);
  add_log_levels(argv, o, {});
  return argv;
}

std::vector<std::string> gga_initiator_argv(const gga_options& options, const std::string& program,
                                            const std::string& channel, const std::string& plain,
                                            const std::vector<uint32_t>& cores) {
  zero_copy_options o = options.common;
  o.content = plain;
  return initiator_argv(o, program, channel, cores);
}

}  // namespace zc::local
