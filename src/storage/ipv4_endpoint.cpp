#include "storage/ipv4_endpoint.hpp"

#include <fmt/format.h>

#include "core/status.hpp"

namespace zc::storage {
namespace {

[[noreturn]] void reject(std::string_view text, std::string_view why,
                         std::string_view expected = "a.b.c.d:port") {
  throw status_error(status::invalid_value,
                     fmt::format("Invalid address \"{}\": {} (expected {})", text, why, expected));
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// Parses a run of decimal digits no longer than max_digits, with no leading zero unless it is
// just "0". Returns false when `field` is not that.
bool parse_decimal(std::string_view field, size_t max_digits, uint32_t& value) {
  if (field.empty() || field.size() > max_digits) return false;
  if (field.size() > 1 && field[0] == '0') return false;
  value = 0;
  for (char c : field) {
    if (!is_digit(c)) return false;
    value = value * 10 + uint32_t(c - '0');
  }
  return true;
}

}  // namespace

std::string ipv4_endpoint::to_string() const {
  return fmt::format("{}.{}.{}.{}:{}", address >> 24, (address >> 16) & 0xFF, (address >> 8) & 0xFF,
                     address & 0xFF, port);
}

namespace {

// The four dotted octets of `host`; `text` and `expected` are for the error.
uint32_t parse_octets(std::string_view host, std::string_view text, std::string_view expected) {
  uint32_t address = 0;
  size_t start = 0;
  for (int octet = 0; octet < 4; ++octet) {
    const size_t dot = octet < 3 ? host.find('.', start) : host.size();
    if (dot == std::string_view::npos) reject(text, "the address needs four octets", expected);
    uint32_t value = 0;
    const std::string_view field = host.substr(start, dot - start);
    if (!parse_decimal(field, 3, value) || value > 255)
      reject(text, fmt::format("bad octet \"{}\"", field), expected);
    address = address << 8 | value;
    start = dot + 1;
  }
  return address;
}

}  // namespace

ipv4_endpoint parse_ipv4_endpoint(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) reject(text, "no port");
  const std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);

  ipv4_endpoint result;
  result.address = parse_octets(host, text, "a.b.c.d:port");

  uint32_t port = 0;
  if (!parse_decimal(port_text, 5, port) || port == 0 || port > 65535)
    reject(text, fmt::format("bad port \"{}\" (1..65535)", port_text));
  result.port = static_cast<uint16_t>(port);
  return result;
}

uint32_t parse_ipv4_address(std::string_view text) {
  return parse_octets(text, text, "a.b.c.d");
}

}  // namespace zc::storage
