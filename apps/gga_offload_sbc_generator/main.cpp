// zcstore_gga_offload_sbc_generator: a plain file -> the three .sbc files (data_1, data_2,
// data_p) that the gga offload pipeline's targets start from (REFERENCE_SPEC §1.5, §5.3), in
// the image format v2 of docs/FORMATS.md §4.3 or, with --format v1, the reference's.
#include <unistd.h>

#include <cstdio>

#include "core/cli.hpp"
#include "core/status.hpp"
#include "generator.hpp"
#include "generator_config.hpp"

namespace {

// Inputs at least this big get a progress line, when stderr is a terminal.
constexpr uint64_t progress_min_input = 64ull << 20;

}  // namespace

int main(int argc, char** argv) {
  using namespace zc;
  core::print_banner(sbc_generator::program_name, ZC_VERSION_STRING);
  sbc_generator::generator_config config;
  if (auto code = sbc_generator::parse_config(argc, argv, config)) return *code;
  sbc_generator::print_config(config);
  // The reference printed this without a newline (REFERENCE_SPEC §8.6).
  std::printf("Processing data...\n");
  std::fflush(stdout);

  const bool terminal = ::isatty(STDERR_FILENO) == 1;
  int shown = -1;
  auto progress = [&](uint32_t done, uint32_t total) {
    if (!terminal || uint64_t(total) * config.block_size < progress_min_input) return;
    const int percent = static_cast<int>(uint64_t(done) * 100 / total);
    if (percent == shown) return;
    shown = percent;
    std::fprintf(stderr, "\r%3d%% (%u of %u blocks)%s", percent, done, total,
                 done == total ? "\n" : "");
  };
  return core::run_guarded(sbc_generator::program_name, [&] {
    sbc_generator::generator_result result;
    try {
      result = sbc_generator::generate(config, progress);
    } catch (...) {
      if (shown >= 0) std::fputc('\n', stderr);  // end the progress line before the error's
      throw;
    }
    std::printf("Output info:\n\tBlock size: %u\n\tOut block count: %u\n", config.block_size,
                result.block_count);
    // v1's lines are the reference's; v2's .sbc files hold more blocks than the input (the
    // entries and the label block), and may hold blocks stored raw.
    if (config.format == accel::gga_format::v2)
      std::printf("\tFormat: v2\n\tTarget block count: %u\n\tStored raw: %u blocks\n",
                  result.target_block_count, result.raw_blocks);
    for (const auto* path : {&config.data_1, &config.data_2, &config.data_p})
      std::printf("\t%s created successfully\n", path->c_str());
    return 0;
  });
}
