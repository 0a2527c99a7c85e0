// libFuzzer harness for the RDMA memory export blob as a peer hands it over
// (core::memory_map::import_rdma): anything malformed is a status_error, never a crash or an
// over-read, and what imports satisfies the invariants the rdma layer relies on.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/memory_map.hpp"

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> blob(data, data + size);
  try {
    auto map = zc::core::memory_map::import_rdma(blob);
    const auto& r = map->remote();
    check(map->is_remote());
    check(r.export_id != 0 && r.key != 0 && r.length != 0);
    check(r.base + r.length >= r.base);
    check(map->size() == r.length);
  } catch (const zc::status_error& e) {
    check(e.code() != zc::status::success);
  }
  return 0;
}
