#include "storage/tls_psk.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/status.hpp"
#include "support/subprocess.hpp"

namespace zc::storage {
namespace {

// The text of the status_error that parsing `text` throws ("" when it parses).
std::string parse_error(std::string_view text) {
  try {
    (void)parse_psk_file(text, "keys.psk");
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::invalid_value);
    return e.what();
  }
  return "";
}

TEST(tls_psk_file, psktool_lines_parse_into_identities_and_keys) {
  // What `psktool -u zcstore -p keys.psk` writes (a 32-byte key), plus a second client.
  const psk_file f = parse_psk_file(
      "zcstore:8d4a1e2f0b9c7d6e5f4a3b2c1d0e0f1a2b3c4d5e6f708192a3b4c5d6e7f80910\n"
      "backup:00FFab\n",
      "keys.psk");
  EXPECT_EQ(f.path, "keys.psk");
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.entries[0].identity, "zcstore");
  ASSERT_EQ(f.entries[0].key.size(), 32u);
  EXPECT_EQ(f.entries[0].key[0], 0x8d);
  EXPECT_EQ(f.entries[0].key[31], 0x10);
  EXPECT_EQ(f.entries[1].identity, "backup");
  EXPECT_EQ(f.entries[1].key, (std::vector<uint8_t>{0x00, 0xff, 0xab}));
}

TEST(tls_psk_file, the_last_newline_is_optional) {
  const psk_file f = parse_psk_file("a:0102", "k");
  ASSERT_EQ(f.entries.size(), 1u);
  EXPECT_EQ(f.entries[0].key, (std::vector<uint8_t>{1, 2}));
}

TEST(tls_psk_file, bad_hex_is_refused_with_the_line_number) {
  const std::string e = parse_error("a:0102\nb:01zz\n");
  EXPECT_NE(e.find("keys.psk line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("not hexadecimal"), std::string::npos) << e;
  EXPECT_NE(parse_error("a:012").find("odd number of hex digits"), std::string::npos);
  EXPECT_NE(parse_error("a: 0102").find("not hexadecimal"), std::string::npos);
  EXPECT_NE(parse_error("a:0102\r\n").find("not hexadecimal"), std::string::npos);
}

TEST(tls_psk_file, a_line_without_a_colon_is_refused) {
  const std::string e = parse_error("zcstore 0102\n");
  EXPECT_NE(e.find("keys.psk line 1"), std::string::npos) << e;
  EXPECT_NE(e.find("no ':'"), std::string::npos) << e;
}

TEST(tls_psk_file, empty_keys_identities_lines_and_files_are_refused) {
  EXPECT_NE(parse_error("zcstore:\n").find("empty key"), std::string::npos);
  EXPECT_NE(parse_error(":0102\n").find("empty identity"), std::string::npos);
  EXPECT_NE(parse_error("a:01\n\nb:02\n").find("line 2"), std::string::npos);
  EXPECT_NE(parse_error("").find("no keys"), std::string::npos);
  EXPECT_NE(parse_error("a:01\na:02\n").find("appears twice"), std::string::npos);
  EXPECT_NE(parse_error("a\tb:01\n").find("control character"), std::string::npos);
  EXPECT_NE(parse_error(std::string(max_psk_identity_size + 1, 'x') + ":01").find("longer"),
            std::string::npos);
}

TEST(tls_psk_file, a_missing_file_is_refused_with_its_path) {
  try {
    (void)load_psk_file("/nonexistent/keys.psk");
    ADD_FAILURE() << "loaded a missing file";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::invalid_value);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/keys.psk"), std::string::npos) << e.what();
  }
}

TEST(tls_psk_file, a_file_on_disk_loads) {
  const auto path = std::filesystem::temp_directory_path() / (test::unique_name("psk") + ".psk");
  std::ofstream(path) << "zcstore:0123456789abcdef\n";
  const psk_file f = load_psk_file(path.string());
  std::filesystem::remove(path);
  ASSERT_EQ(f.entries.size(), 1u);
  EXPECT_EQ(f.entries[0].key.size(), 8u);
  EXPECT_EQ(f.path, path.string());
}

}  // namespace
}  // namespace zc::storage
