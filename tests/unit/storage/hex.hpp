// Test helper: bytes from the hex notation of docs/FORMATS.md ("00 00 00 0C | 00 01"): every
// whitespace-separated token of exactly two hex digits is a byte, anything else is ignored.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace zc::storage::test {

inline std::vector<uint8_t> hex(std::string_view text) {
  std::vector<uint8_t> out;
  std::istringstream in{std::string(text)};
  std::string token;
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  while (in >> token) {
    if (token.size() != 2 || digit(token[0]) < 0 || digit(token[1]) < 0) continue;
    out.push_back(uint8_t(digit(token[0]) << 4 | digit(token[1])));
  }
  return out;
}

inline std::vector<uint8_t> bytes_of(std::string_view s) {
  return {s.begin(), s.end()};
}

}  // namespace zc::storage::test
