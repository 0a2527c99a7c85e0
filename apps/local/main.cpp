// zcstore_local: starts a whole pipeline on one machine and stops it cleanly.
//   zcstore_local zero-copy [options] [-- initiator flags]
//   zcstore_local gga [options] [-- initiator flags]
#include <unistd.h>

#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "core/cli.hpp"
#include "gga_launcher.hpp"
#include "gga_plan.hpp"
#include "zero_copy_launcher.hpp"
#include "zero_copy_plan.hpp"

namespace {

void usage(std::ostream& out) {
  out << "Usage: zcstore_local zero-copy|gga [options] [-- initiator flags]\n"
         "       zcstore_local zero-copy|gga --nbd SOCKET [--backing-dir DIR] [-- zcstore_nbd "
         "flags]\n"
         "  zero-copy   target + zero-copy service + initiator on this machine\n"
         "  gga         sbc generator + three targets + gga offload service + initiator\n"
         "Run `zcstore_local zero-copy --help` or `zcstore_local gga --help` for the options.\n";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace zc::local;
  if (argc < 2) {
    std::cerr << program_name << ": a pipeline is needed (zero-copy, gga); see --help\n";
    return zc::core::exit_bad_usage;
  }
  const std::string pipeline = argv[1];
  if (pipeline == "-h" || pipeline == "--help") {
    usage(std::cout);
    return 0;
  }
  if (pipeline == "gga") {
    auto parsed = parse_gga_options(std::vector<std::string>(argv + 2, argv + argc));
    if (parsed.exit_code) return *parsed.exit_code;
    parsed.options.common.terminal = ::isatty(STDERR_FILENO) == 1;
    install_launcher_signal_handlers();
    auto programs = find_gga_programs(parsed.options.common.bin_dir);
    if (!programs) return 1;
    if (!parsed.options.common.nbd_socket.empty() &&
        !find_named_programs({{nbd_program, &programs->nbd}}, parsed.options.common.bin_dir))
      return 1;
    return run_gga(parsed.options, *programs);
  }
  if (pipeline != "zero-copy") {
    std::cerr << program_name << ": unknown pipeline \"" << pipeline
              << "\" (known: zero-copy, gga); see --help\n";
    return zc::core::exit_bad_usage;
  }
  auto parsed = parse_zero_copy_options(std::vector<std::string>(argv + 2, argv + argc));
  if (parsed.exit_code) return *parsed.exit_code;
  parsed.options.terminal = ::isatty(STDERR_FILENO) == 1;
  install_launcher_signal_handlers();
  auto programs = find_programs(parsed.options.bin_dir);
  if (!programs) return 1;
  if (!parsed.options.nbd_socket.empty() &&
      !find_named_programs({{nbd_program, &programs->nbd}}, parsed.options.bin_dir))
    return 1;
  return run_zero_copy(parsed.options, *programs);
}
