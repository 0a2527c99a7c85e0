#include "storage/sbc_file.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/subprocess.hpp"
#include "unit/storage/hex.hpp"

namespace zc::storage {
namespace {

namespace fs = std::filesystem;

// A scratch directory removed at the end of the test.
class sbc_file_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / zc::test::unique_name("zc-sbc");
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string write_file(const std::string& name, const std::vector<uint8_t>& bytes) const {
    std::ofstream out(path(name), std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return path(name);
  }

  static std::vector<uint8_t> read_file(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  template <typename F>
  static status error_of(F&& f, std::string* text = nullptr) {
    try {
      f();
    } catch (const status_error& e) {
      if (text) *text = e.what();
      return e.code();
    }
    return status::success;
  }

  fs::path dir_;
};

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = uint8_t(i * 7 + 3);
  return v;
}

TEST_F(sbc_file_test, header_matches_the_reference_layout) {
  const auto h = encode_sbc_header(4096, 128);
  EXPECT_EQ(std::vector<uint8_t>(h.begin(), h.end()),
            test::hex("DE AD F0 0D 13 37 FA DE | 00 00 10 00 | 00 00 00 80"));
}

TEST_F(sbc_file_test, write_then_read_round_trips) {
  const auto content = pattern(64 * 5);
  const auto p = path("a.sbc");
  write_sbc(p, 64, 5, content);

  const auto raw = read_file(p);
  ASSERT_EQ(raw.size(), sbc_header_size + content.size());
  EXPECT_EQ(std::vector<uint8_t>(raw.begin(), raw.begin() + 16),
            test::hex("DE AD F0 0D 13 37 FA DE 00 00 00 40 00 00 00 05"));

  EXPECT_TRUE(is_sbc(p));
  const sbc_content got = read_sbc(p);
  EXPECT_EQ(got.block_size, 64u);
  EXPECT_EQ(got.block_count, 5u);
  EXPECT_EQ(got.content, content);
}

TEST_F(sbc_file_test, writer_refuses_content_that_differs_from_the_header) {
  std::string text;
  EXPECT_EQ(error_of([&] { write_sbc(path("b.sbc"), 64, 5, pattern(64 * 5 + 1)); }, &text),
            status::invalid_value);
  EXPECT_NE(text.find("declares"), std::string::npos) << text;
  EXPECT_EQ(error_of([&] { write_sbc(path("b.sbc"), 64, 5, pattern(64 * 4)); }),
            status::invalid_value);
  EXPECT_EQ(error_of([&] { write_sbc(path("b.sbc"), 0, 5, {}); }), status::invalid_value);
}

TEST_F(sbc_file_test, writer_refuses_more_than_2_gib) {
  std::string text;
  EXPECT_EQ(error_of([&] { write_sbc(path("c.sbc"), 65536, 32769, pattern(16)); }, &text),
            status::too_big);
  EXPECT_NE(text.find("Exceeded limit"), std::string::npos) << text;
}

TEST_F(sbc_file_test, header_declaring_more_than_2_gib_is_refused) {
  auto bytes = test::hex("DE AD F0 0D 13 37 FA DE | 00 01 00 00 | 00 00 80 01");
  const auto p = write_file("big.sbc", bytes);
  std::string text;
  EXPECT_EQ(error_of([&] { (void)read_sbc(p); }, &text), status::too_big);
  EXPECT_NE(text.find("Exceeded limit"), std::string::npos) << text;
}

TEST_F(sbc_file_test, exactly_2_gib_is_within_the_limit) {
  // 65536 x 32768 = 2^31: not "Exceeded limit", but this file has no content, so IO_FAILED,
  // found before any 2 GiB buffer is allocated.
  const auto p =
      write_file("edge.sbc", test::hex("DE AD F0 0D 13 37 FA DE 00 01 00 00 00 00 80 00"));
  EXPECT_EQ(error_of([&] { (void)read_sbc(p); }), status::io_failed);
}

TEST_F(sbc_file_test, truncated_content_is_io_failed) {
  const auto p = path("t.sbc");
  write_sbc(p, 64, 4, pattern(256));
  auto raw = read_file(p);
  ASSERT_EQ(raw.size(), sbc_header_size + 256);
  write_file("t.sbc", std::vector<uint8_t>(raw.begin(), raw.end() - 1));
  std::string text;
  EXPECT_EQ(error_of([&] { (void)read_sbc(p); }, &text), status::io_failed);
  EXPECT_NE(text.find("truncated"), std::string::npos) << text;
}

TEST_F(sbc_file_test, truncated_header_is_io_failed) {
  const auto p = write_file("h.sbc", test::hex("DE AD F0 0D 13 37 FA DE 00 00 10"));
  EXPECT_TRUE(is_sbc(p));
  EXPECT_EQ(error_of([&] { (void)read_sbc(p); }), status::io_failed);
}

TEST_F(sbc_file_test, bytes_after_the_content_are_ignored) {
  const auto p = path("x.sbc");
  write_sbc(p, 8, 2, pattern(16));
  auto raw = read_file(p);
  raw.push_back(0x99);
  write_file("x.sbc", raw);
  EXPECT_EQ(read_sbc(p).content, pattern(16));
}

TEST_F(sbc_file_test, files_without_the_magic_are_raw) {
  EXPECT_FALSE(is_sbc(write_file("empty", {})));
  EXPECT_FALSE(is_sbc(write_file("seven", test::hex("DE AD F0 0D 13 37 FA"))));
  EXPECT_FALSE(is_sbc(write_file("other", test::hex("DE AD F0 0D 13 37 FA DF 00 00 00 01"))));
  // Little-endian magic is not the magic.
  EXPECT_FALSE(is_sbc(write_file("le", test::hex("DE FA 37 13 0D F0 AD DE 00 00 00 01"))));
  EXPECT_EQ(error_of([&] { (void)read_sbc(path("other")); }), status::invalid_value);
}

TEST_F(sbc_file_test, missing_file_is_reported) {
  EXPECT_EQ(error_of([&] { (void)is_sbc(path("nope")); }), status::not_found);
  EXPECT_EQ(error_of([&] { (void)read_sbc(path("nope")); }), status::not_found);
}

TEST_F(sbc_file_test, binary_content_loads_sbc_or_exact_raw_files) {
  const auto sbc = path("c.sbc");
  write_sbc(sbc, 32, 3, pattern(96));
  const sbc_content from_sbc = load_binary_content(sbc, 4096, 128);  // header wins
  EXPECT_EQ(from_sbc.block_size, 32u);
  EXPECT_EQ(from_sbc.block_count, 3u);
  EXPECT_EQ(from_sbc.content, pattern(96));

  const auto raw = write_file("raw", pattern(64));
  const sbc_content from_raw = load_binary_content(raw, 16, 4);
  EXPECT_EQ(from_raw.block_size, 16u);
  EXPECT_EQ(from_raw.block_count, 4u);
  EXPECT_EQ(from_raw.content, pattern(64));
  EXPECT_EQ(error_of([&] { (void)load_binary_content(raw, 16, 5); }), status::invalid_value);
}

TEST_F(sbc_file_test, decoder_reads_an_image_in_memory_without_copying) {
  std::vector<uint8_t> image(sbc_header_size + 96 + 3, 0x99);  // 3 trailing bytes, ignored
  const auto header = encode_sbc_header(32, 3);
  std::copy(header.begin(), header.end(), image.begin());
  const auto content = pattern(96);
  std::copy(content.begin(), content.end(), image.begin() + sbc_header_size);
  const sbc_view v = decode_sbc(image);
  EXPECT_EQ(v.header.block_size, 32u);
  EXPECT_EQ(v.header.block_count, 3u);
  EXPECT_EQ(v.content.data(), image.data() + sbc_header_size);
  EXPECT_EQ(std::vector<uint8_t>(v.content.begin(), v.content.end()), content);
}

TEST_F(sbc_file_test, decoder_refuses_what_the_file_reader_refuses) {
  auto header = [](uint32_t bs, uint32_t bc) {
    const auto h = encode_sbc_header(bs, bc);
    return std::vector<uint8_t>(h.begin(), h.end());
  };
  std::string text;
  EXPECT_EQ(error_of([&] { (void)decode_sbc({}); }), status::io_failed);
  EXPECT_EQ(error_of([&] { (void)decode_sbc(test::hex("DE AD F0 0D 13 37 FA")); }),
            status::io_failed);
  EXPECT_EQ(error_of([&] { (void)decode_sbc(test::hex("DE AD F0 0D 13 37 FA DE 00 00 10")); }),
            status::io_failed);
  EXPECT_EQ(
      error_of([&] { (void)decode_sbc(test::hex("DE AD F0 0D 13 37 FA DF 00 00 00 01")); }, &text),
      status::invalid_value);
  EXPECT_NE(text.find("not an .sbc file"), std::string::npos) << text;
  EXPECT_EQ(error_of([&] { (void)decode_sbc(header(0, 5)); }), status::invalid_value);
  EXPECT_EQ(error_of([&] { (void)decode_sbc(header(5, 0)); }), status::invalid_value);
  EXPECT_EQ(error_of([&] { (void)decode_sbc(header(65536, 32769)); }, &text), status::too_big);
  EXPECT_NE(text.find("Exceeded limit"), std::string::npos) << text;
  auto short_content = header(8, 2);
  short_content.resize(sbc_header_size + 15);
  EXPECT_EQ(error_of([&] { (void)decode_sbc(short_content); }, &text), status::io_failed);
  EXPECT_NE(text.find("truncated"), std::string::npos) << text;
  // The header alone decodes without its content.
  EXPECT_EQ(decode_sbc_header(header(8, 2), "h").content_size(), 16u);
}

TEST_F(sbc_file_test, content_file_reads_straight_into_the_callers_memory) {
  const auto sbc = path("c.sbc");
  write_sbc(sbc, 32, 3, pattern(96));
  binary_content_file from_sbc(sbc, 4096, 128);  // header wins
  EXPECT_TRUE(from_sbc.is_sbc());
  EXPECT_EQ(from_sbc.block_size(), 32u);
  EXPECT_EQ(from_sbc.block_count(), 3u);
  ASSERT_EQ(from_sbc.size(), 96u);
  std::vector<uint8_t> memory(96 + 2, 0xEE);
  from_sbc.read_into({memory.data() + 1, 96});
  EXPECT_EQ(std::vector<uint8_t>(memory.begin() + 1, memory.end() - 1), pattern(96));
  EXPECT_EQ(memory.front(), 0xEE);
  EXPECT_EQ(memory.back(), 0xEE);
  // A destination of another size is refused before anything is read.
  EXPECT_EQ(error_of([&] { from_sbc.read_into({memory.data(), 95}); }), status::invalid_value);

  binary_content_file from_raw(write_file("raw", pattern(64)), 16, 4);
  EXPECT_FALSE(from_raw.is_sbc());
  std::vector<uint8_t> raw_memory(64);
  from_raw.read_into(raw_memory);
  EXPECT_EQ(raw_memory, pattern(64));
  // Shorter than when it was opened: io_failed, not a partly filled store taken as whole.
  write_file("raw", pattern(60));
  EXPECT_EQ(error_of([&] { from_raw.read_into(raw_memory); }), status::io_failed);
}

TEST_F(sbc_file_test, streaming_writer_writes_what_write_sbc_writes) {
  std::vector<uint8_t> content(3 * 1000);
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<uint8_t>(i * 7);
  write_sbc(path("whole.sbc"), 1000, 3, content);
  {
    sbc_writer w(path("streamed.sbc"), 1000, 3);
    for (size_t i = 0; i < 3; ++i) w.append(std::span(content).subspan(i * 1000, 1000));
    EXPECT_EQ(w.blocks_written(), 3u);
    w.finish();
  }
  EXPECT_EQ(read_file(path("streamed.sbc")), read_file(path("whole.sbc")));
  const sbc_content back = read_sbc(path("streamed.sbc"));
  EXPECT_EQ(back.content, content);
}

TEST_F(sbc_file_test, streaming_writer_refuses_wrong_blocks_and_removes_an_unfinished_file) {
  std::vector<uint8_t> block(64, 1);
  EXPECT_EQ(error_of([&] { sbc_writer(path("zero.sbc"), 0, 1); }), status::invalid_value);
  EXPECT_EQ(error_of([&] { sbc_writer(path("big.sbc"), 1u << 20, 4097); }), status::too_big);
  EXPECT_FALSE(fs::exists(path("zero.sbc")));
  {
    sbc_writer w(path("short.sbc"), 64, 2);
    EXPECT_EQ(error_of([&] { w.append(std::span(block).first(63)); }), status::invalid_value);
    w.append(block);
    EXPECT_EQ(error_of([&] { w.finish(); }), status::invalid_value);  // 1 of 2 blocks
    w.append(block);
    EXPECT_EQ(error_of([&] { w.append(block); }), status::invalid_value);  // a third
    EXPECT_TRUE(fs::exists(path("short.sbc")));
  }
  // Destroyed without finish(): no half-written file is left behind.
  EXPECT_FALSE(fs::exists(path("short.sbc")));
  EXPECT_EQ(error_of([&] { sbc_writer(dir_.string() + "/no/such/dir/x.sbc", 64, 1); }),
            status::io_failed);
}

}  // namespace
}  // namespace zc::storage
