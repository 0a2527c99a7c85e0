// Runs `zcstore_local gga`: makes the plain file (unless --content names one), runs the sbc
// generator on it, then starts the three targets, the gga offload service and the initiator
// through run_pipeline (see zero_copy_launcher.hpp: same output prefixes, exit status and
// Ctrl-C rules), and removes its temporary folder on the way out. Main thread only.
//
//   auto programs = zc::local::find_gga_programs(options.common.bin_dir);
//   if (!programs) return 1;
//   return zc::local::run_gga(options, *programs);
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "gga_plan.hpp"
#include "zero_copy_launcher.hpp"

namespace zc::local {

inline constexpr const char* generator_program = "zcstore_gga_offload_sbc_generator";
inline constexpr const char* gga_service_program = "zcstore_comch_to_rdma_gga_offload";

struct gga_programs {
  std::string generator, target, service, initiator;
  std::string nbd;  // found only for --nbd
};

// The four programs, or nullopt after printing which one is missing (as find_programs).
std::optional<gga_programs> find_gga_programs(const std::string& bin_dir);

// `size` bytes of text that LZ4 compresses well but not trivially (each block's image fits in
// half a block), as the gga pipeline's tests use.
std::string compressible_text(uint64_t size);

// The output names of the three targets, in start order.
inline constexpr std::array<const char*, 3> gga_target_names{"target1", "target2", "target3"};

int run_gga(const gga_options& options, const gga_programs& programs,
            const launcher_bounds& bounds = {}, output_sink sink = name_bar_writer());

}  // namespace zc::local
