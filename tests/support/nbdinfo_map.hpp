// "nbdinfo --map" output as (offset, length, type) triples, for the NBD tests.
#pragma once

#include <array>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace zc::test {

using nbd_extents = std::vector<std::array<uint64_t, 3>>;

// Each line "offset length type description"; lines that do not start so are skipped.
inline nbd_extents parse_nbdinfo_map(const std::string& text) {
  nbd_extents out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    uint64_t offset = 0, length = 0, type = 0;
    if (l >> offset >> length >> type) out.push_back({offset, length, type});
  }
  return out;
}

}  // namespace zc::test
