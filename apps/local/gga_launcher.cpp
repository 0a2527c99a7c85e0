#include "gga_launcher.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>

#include <cstring>

#include <filesystem>
#include <fstream>

#include "channel_name.hpp"
#include "core/thread.hpp"

namespace zc::local {
namespace {

namespace fs = std::filesystem;

// The run's temporary folder (generated plain file, images), removed on every way out.
class scratch_dir {
 public:
  scratch_dir() {
    path_ = fs::temp_directory_path() / unique_channel_name("zcstore_local-gga");
    fs::create_directories(path_);
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

}  // namespace

std::optional<gga_programs> find_gga_programs(const std::string& bin_dir) {
  gga_programs programs;
  if (!find_named_programs({{generator_program, &programs.generator},
                            {target_program, &programs.target},
                            {gga_service_program, &programs.service},
                            {initiator_program, &programs.initiator}},
                           bin_dir))
    return std::nullopt;
  return programs;
}

std::string compressible_text(uint64_t size) {
  std::string text;
  text.reserve(size + 64);
  for (uint64_t i = 0; text.size() < size; ++i)
    text += fmt::format("block storage line {} of the gga pipeline\n", i * 7919 % 10007);
  text.resize(size);
  return text;
}

int run_gga(const gga_options& options, const gga_programs& programs, const launcher_bounds& bounds,
            output_sink sink) {
  const zero_copy_options& o = options.common;
  if (const auto refused = prepare_backing_dir(o.backing_dir)) return *refused;
  std::optional<scratch_dir> scratch;
  try {
    scratch.emplace();
  } catch (const std::exception& e) {
    launcher_note(fmt::format("cannot make a temporary folder: {}", e.what()));
    return 1;
  }
  std::string plain = o.content;
  if (plain.empty()) {
    plain = (scratch->path() / "plain.bin").string();
    const std::string text = compressible_text(o.target_size);
    std::ofstream out(plain, std::ios::binary);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!out.flush()) {
      launcher_note(fmt::format("cannot write {}", plain));
      return 1;
    }
    launcher_note(
        fmt::format("made a compressible plain file of {} bytes: {}", text.size(), plain));
  } else {
    // The generator pads the last block, but the initiator compares the storage byte for byte
    // with the plain file: it must hold whole blocks.
    struct stat st {};
    if (::stat(plain.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0 ||
        static_cast<uint64_t>(st.st_size) % o.block_size != 0) {
      launcher_note(fmt::format("--content {}: not a non-empty file of whole {}-byte blocks", plain,
                                o.block_size));
      return 1;
    }
  }

  // The generator runs to its end before anything else starts.
  const gga_images images = gga_image_paths(scratch->path().string());
  {
    supervisor_options supervision;
    supervision.sink = sink;
    supervision.destructor_grace = bounds.stop_grace;
    supervisor sup(std::move(supervision));
    auto argv = generator_argv(options, programs.generator, plain, images);
    std::string command;
    for (const auto& w : argv) command += (command.empty() ? "" : " ") + w;
    supervisor::child_id id{};
    try {
      id = sup.start({.name = "generator", .argv = std::move(argv), .env = {}});
    } catch (const std::exception& e) {
      launcher_note(e.what());
      return 1;
    }
    launcher_note(fmt::format("started generator (pid {}): {}", sup.pid(id), command));
    auto status = sup.wait_exit(id, bounds.prepare);
    if (core::stop_requested()) {
      sup.stop_all(bounds.stop_grace);
      const int signo = launcher_stop_signal();
      launcher_note(fmt::format("stopping the pipeline ({})", strsignal(signo)));
      return 128 + signo;
    }
    if (!status) {
      launcher_note("generator did not end in time");
      sup.stop_all(bounds.stop_grace);
      return 1;
    }
    if (status->shell_code() != 0) {
      launcher_note(fmt::format("generator failed ({})", status->describe()));
      return 1;
    }
  }

  const std::vector<uint32_t> cores = usable_cpus();
  const std::string channel = unique_channel_name("zcstore_local");
  const std::array<std::string, 3> image_of{images.data_1, images.data_2, images.data_p};
  std::vector<pipeline_stage> stages;
  for (size_t i = 0; i < 3; ++i)
    stages.push_back({.name = gga_target_names[i],
                      .argv =
                          [&, i](const std::vector<uint16_t>&) {
                            return gga_target_argv(options, programs.target, image_of[i], cores,
                                                   static_cast<uint32_t>(i));
                          },
                      .awaited = pipeline_stage::ready::port});
  stages.push_back({.name = "service",
                    .argv =
                        [&](const std::vector<uint16_t>& ports) {
                          return gga_service_argv(options, programs.service, channel,
                                                  {ports.at(0), ports.at(1), ports.at(2)}, cores);
                        },
                    .awaited = pipeline_stage::ready::channel});
  stages.push_back({.name = o.nbd_socket.empty() ? "initiator" : "nbd",
                    .argv =
                        [&](const std::vector<uint16_t>&) {
                          return o.nbd_socket.empty()
                                     ? gga_initiator_argv(options, programs.initiator, channel,
                                                          plain, cores)
                                     : nbd_argv(o, programs.nbd, channel, cores);
                        },
                    .awaited = pipeline_stage::ready::none,
                    .restart = !o.nbd_socket.empty()});
  return run_pipeline(stages, o.control_timeout_seconds, bounds, std::move(sink));
}

}  // namespace zc::local
