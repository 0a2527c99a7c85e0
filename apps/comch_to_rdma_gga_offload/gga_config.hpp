// zcstore_comch_to_rdma_gga_offload's configuration: the reference's flags (REFERENCE_SPEC §1.3)
// plus --json, --poll-mode and the log levels, and the checks made before anything starts
// (--matrix-type included: the reference only looked at it during init, §8.4).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "accel/ec_engine.hpp"
#include "accel/gga_format.hpp"
#include "core/progress_engine.hpp"
#include "service/service_config.hpp"

namespace zc::gga_offload {

inline constexpr const char* program_name = "zcstore_comch_to_rdma_gga_offload";

struct gga_config : service::service_config {
  std::string data_1_storage;  // "a.b.c.d:port", checked
  std::string data_2_storage;
  std::string data_p_storage;
  accel::ec_matrix matrix = accel::ec_matrix::vandermonde;
  uint64_t trigger_recovery_read_every_n = 0;
  accel::gga_format format = accel::gga_format::v2;
  uint32_t rebuild_rate_mib = 64;
};

// Parses and checks argv. Returns an exit status when the program must stop now (help, version,
// or a bad command line: one line on stderr, exit 2).
std::optional<int> parse_config(int argc, const char* const* argv, gga_config& out);

// The configuration as the reference prints it.
void print_config(const gga_config& config);

}  // namespace zc::gga_offload
