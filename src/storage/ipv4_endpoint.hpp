// An IPv4 address and TCP port parsed from "a.b.c.d:port", strictly: the reference accepted
// garbage and connected to 0.0.0.0 instead (REFERENCE_SPEC §8.6). A plain value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace zc::storage {

struct ipv4_endpoint {
  uint32_t address = 0;  // host byte order: 127.0.0.1 is 0x7F000001
  uint16_t port = 0;

  // "a.b.c.d:port"
  std::string to_string() const;
  bool operator==(const ipv4_endpoint&) const = default;
};

// Accepts exactly four dotted decimal octets 0..255 (no sign, no leading zero, so "010" is never
// read as octal), a colon, and a decimal port 1..65535. Throws status_error(invalid_value) naming
// the problem otherwise.
ipv4_endpoint parse_ipv4_endpoint(std::string_view text);

// Just the address, "a.b.c.d", with the same rules (host byte order). Throws
// status_error(invalid_value) naming the problem.
uint32_t parse_ipv4_address(std::string_view text);

}  // namespace zc::storage
