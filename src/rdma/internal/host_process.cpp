#include "rdma/internal/host_process.hpp"

#include <unistd.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <string>

namespace zc::rdma::internal {
namespace {

// Start time of a running process, 0 if there is none (a zombie has stopped running: its memory
// and endpoints are gone even though its /proc entry stays until it is reaped).
uint64_t start_time_of(uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return 0;
  // The command name (field 2) may contain spaces: count fields after its closing parenthesis.
  auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 3 && (field == "Z" || field == "X" || field == "x")) return 0;
    if (i == 22) return std::stoull(field);
  }
  return 0;
}

uint64_t boot_hash() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::hash<std::string>{}(id) | 1;  // never 0: 0 means "unknown host"
}

}  // namespace

host_process host_process::self() {
  static const host_process me = [] {
    host_process p;
    p.host_id = boot_hash();
    p.pid = static_cast<uint32_t>(getpid());
    p.start_time = start_time_of(p.pid);
    return p;
  }();
  return me;
}

bool host_process::alive() const {
  uint64_t now = start_time_of(pid);
  return now != 0 && now == start_time;
}

}  // namespace zc::rdma::internal
