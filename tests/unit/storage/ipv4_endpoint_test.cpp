#include "storage/ipv4_endpoint.hpp"

#include <gtest/gtest.h>

#include "core/status.hpp"

namespace zc::storage {
namespace {

TEST(ipv4_endpoint, parses_dotted_quad_and_port) {
  EXPECT_EQ(parse_ipv4_endpoint("127.0.0.1:1234"), (ipv4_endpoint{0x7F000001u, 1234}));
  EXPECT_EQ(parse_ipv4_endpoint("0.0.0.0:1"), (ipv4_endpoint{0, 1}));
  EXPECT_EQ(parse_ipv4_endpoint("255.255.255.255:65535"), (ipv4_endpoint{0xFFFFFFFFu, 65535}));
  EXPECT_EQ(parse_ipv4_endpoint("192.168.10.2:80").to_string(), "192.168.10.2:80");
}

TEST(ipv4_endpoint, rejects_bad_addresses_with_invalid_value) {
  const char* bad[] = {
      "",                  // nothing
      "127.0.0.1",         // no port
      "127.0.0.1:",        // empty port
      ":80",               // no address
      "127.0.0:80",        // three octets
      "127.0.0.1.5:80",    // five octets
      "256.0.0.1:80",      // octet too big
      "1.2.3.1000:80",     // octet too long
      "1.2.3.-1:80",       // sign
      "+1.2.3.4:80",       // sign
      "01.2.3.4:80",       // leading zero (octal in inet_aton)
      "1..3.4:80",         // empty octet
      "1.2.3.4 :80",       // space
      "a.b.c.d:80",        // not numbers
      "localhost:80",      // no host names
      "1.2.3.4:0",         // port 0
      "1.2.3.4:65536",     // port too big
      "1.2.3.4:123456",    // port too long
      "1.2.3.4:80x",       // garbage after the port
      "1.2.3.4:-80",       // sign
      "1.2.3.4:080",       // leading zero
      "1.2.3.4:80:90",     // two ports
      "[::1]:80",          // IPv6
      "1.2.3.4:8%u65535",  // the reference's stray format text
  };
  for (const char* text : bad) {
    try {
      (void)parse_ipv4_endpoint(text);
      ADD_FAILURE() << "accepted \"" << text << "\"";
    } catch (const status_error& e) {
      EXPECT_EQ(e.code(), status::invalid_value) << text;
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  }
}

TEST(ipv4_address, a_bare_address_parses_with_the_same_rules) {
  EXPECT_EQ(parse_ipv4_address("0.0.0.0"), 0u);
  EXPECT_EQ(parse_ipv4_address("127.0.0.1"), 0x7F000001u);
  for (const char* text : {"", "1.2.3", "1.2.3.4:5", "256.0.0.1", "01.2.3.4", "localhost"}) {
    try {
      (void)parse_ipv4_address(text);
      ADD_FAILURE() << "accepted \"" << text << "\"";
    } catch (const status_error& e) {
      EXPECT_EQ(e.code(), status::invalid_value) << text;
      EXPECT_NE(std::string(e.what()).find("(expected a.b.c.d)"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace zc::storage
