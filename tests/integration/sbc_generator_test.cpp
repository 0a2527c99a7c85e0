// zcstore_gga_offload_sbc_generator as a child process, the way a user runs it: its three .sbc
// files checked byte for byte against images and parity built here from first principles
// (liblz4's own frame output minus its header and end mark; GF(2^8) arithmetic written in the
// test), and its refusals (incompressible input naming the block, bad block sizes, a missing
// input, bad flags), each one line and a non-zero exit with no output file left behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "storage/sbc_file.hpp"
#include "support/subprocess.hpp"
#include "unit/accel/accel_test_support.hpp"

namespace zc::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr auto run_timeout = 60s;

class gga_sbc_generator : public ::testing::Test {
 public:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / unique_name("zc-sbcgen");
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_input(const std::vector<uint8_t>& bytes) const {
    std::ofstream out(path("input.bin"), std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return path("input.bin");
  }

  // Runs the generator; returns its exit status (-1 on timeout) and its output in `text`.
  int run(std::vector<std::string> args, std::string* text = nullptr) const {
    args.insert(args.begin(), binary("zcstore_gga_offload_sbc_generator"));
    subprocess p(args);
    const auto code = p.wait(run_timeout);
    if (text != nullptr) *text = p.output();
    return code.value_or(-1);
  }
  std::vector<std::string> outputs_args() const {
    return {"--data-1", path("d1.sbc"), "--data-2", path("d2.sbc"), "--data-p", path("dp.sbc")};
  }
  bool any_output_exists() const {
    return fs::exists(path("d1.sbc")) || fs::exists(path("d2.sbc")) || fs::exists(path("dp.sbc"));
  }

  fs::path dir_;
};

// A file that compresses well but not trivially: text lines with a counter, 5.5 blocks of 4 KiB
// so the last block is padded.
std::vector<uint8_t> compressible_input(size_t size) {
  std::string text;
  for (int i = 0; text.size() < size; ++i)
    text += "block storage line " + std::to_string(i * 7919 % 10007) + " of the gga pipeline\n";
  text.resize(size);
  return {text.begin(), text.end()};
}

void expect_outputs_match(const gga_sbc_generator& t, const std::vector<uint8_t>& input,
                          size_t block, accel::test::parity_row row) {
  const size_t half = block / 2;
  const size_t count = (input.size() + block - 1) / block;
  const auto d1 = storage::read_sbc(t.path("d1.sbc"));
  const auto d2 = storage::read_sbc(t.path("d2.sbc"));
  const auto dp = storage::read_sbc(t.path("dp.sbc"));
  for (const auto* f : {&d1, &d2, &dp}) {
    EXPECT_EQ(f->block_size, half);
    EXPECT_EQ(f->block_count, count);
    ASSERT_EQ(f->content.size(), half * count);
  }
  for (size_t i = 0; i < count; ++i) {
    SCOPED_TRACE("block " + std::to_string(i));
    std::vector<uint8_t> plain(block, 0);  // the last block padded with zeros
    const size_t n = std::min(block, input.size() - i * block);
    std::copy_n(input.begin() + static_cast<std::ptrdiff_t>(i * block), n, plain.begin());
    const auto image = accel::test::reference_image(plain);
    ASSERT_EQ(image.size(), block);
    const std::vector<uint8_t> h1(image.begin(), image.begin() + static_cast<std::ptrdiff_t>(half));
    const std::vector<uint8_t> h2(image.begin() + static_cast<std::ptrdiff_t>(half), image.end());
    const auto slice = [&](const storage::sbc_content& f) {
      const auto at = f.content.begin() + static_cast<std::ptrdiff_t>(i * half);
      return std::vector<uint8_t>(at, at + static_cast<std::ptrdiff_t>(half));
    };
    EXPECT_EQ(slice(d1), h1);
    EXPECT_EQ(slice(d2), h2);
    EXPECT_EQ(slice(dp), accel::test::parity(row, h1, h2));
  }
}

TEST_F(gga_sbc_generator, vandermonde_outputs_are_the_images_and_xor_parity) {
  const auto input = compressible_input(4096 * 5 + 2048);
  auto args = outputs_args();
  args.insert(args.end(), {"--original-input-data", write_input(input), "-d", "03:00.0"});
  std::string text;
  ASSERT_EQ(run(args, &text), 0) << text;
  EXPECT_NE(text.find("Processing data...\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\tBlock size: 4096\n\tOut block count: 6\n"), std::string::npos) << text;
  EXPECT_NE(text.find(path("dp.sbc") + " created successfully"), std::string::npos) << text;
  expect_outputs_match(*this, input, 4096, accel::test::vandermonde_row());
}

TEST_F(gga_sbc_generator, cauchy_outputs_use_the_cauchy_parity_row) {
  const auto input = compressible_input(8192 * 3);
  auto args = outputs_args();
  args.insert(args.end(), {"--original-input-data", write_input(input), "--block-size", "8192",
                           "--matrix-type", "cauchy"});
  std::string text;
  ASSERT_EQ(run(args, &text), 0) << text;
  expect_outputs_match(*this, input, 8192, accel::test::cauchy_row());
}

TEST_F(gga_sbc_generator, incompressible_block_is_refused_with_its_index_and_offset) {
  auto input = compressible_input(4096 * 2);
  const auto noise = accel::test::random_bytes(4096, 42);
  input.insert(input.end(), noise.begin(), noise.end());
  const auto more = compressible_input(4096);
  input.insert(input.end(), more.begin(), more.end());
  auto args = outputs_args();
  args.insert(args.end(), {"--original-input-data", write_input(input)});
  std::string text;
  EXPECT_EQ(run(args, &text), 1) << text;
  EXPECT_NE(text.find("not compressible enough: block 2 (input offset 8192)"), std::string::npos)
      << text;
  EXPECT_FALSE(any_output_exists());
}

TEST_F(gga_sbc_generator, bad_block_sizes_are_refused) {
  const auto input = write_input(compressible_input(4096));
  for (const char* size : {"0", "100", "-64", "abc"}) {
    SCOPED_TRACE(size);
    auto args = outputs_args();
    args.insert(args.end(), {"--original-input-data", input, "--block-size", size});
    std::string text;
    EXPECT_EQ(run(args, &text), 2) << text;
    if (std::string(size) == "0" || std::string(size) == "100") {
      EXPECT_NE(text.find("Block size must be a multiple of 64"), std::string::npos) << text;
    }
    EXPECT_FALSE(any_output_exists());
  }
}

TEST_F(gga_sbc_generator, missing_or_empty_input_is_refused) {
  auto args = outputs_args();
  args.insert(args.end(), {"--original-input-data", path("no-such-file")});
  std::string text;
  EXPECT_EQ(run(args, &text), 1) << text;
  EXPECT_NE(text.find("Unable to open " + path("no-such-file")), std::string::npos) << text;
  EXPECT_FALSE(any_output_exists());

  args = outputs_args();
  args.insert(args.end(), {"--original-input-data", write_input({})});
  EXPECT_EQ(run(args, &text), 1) << text;
  EXPECT_NE(text.find("is empty"), std::string::npos) << text;
  EXPECT_FALSE(any_output_exists());
}

TEST_F(gga_sbc_generator, bad_flags_exit_2) {
  const auto input = write_input(compressible_input(4096));
  std::string text;
  auto args = outputs_args();
  args.insert(args.end(), {"--original-input-data", input, "--matrix-type", "reed-solomon"});
  EXPECT_EQ(run(args, &text), 2) << text;
  EXPECT_EQ(run({"--original-input-data", input}, &text), 2) << text;  // no outputs named
  args = outputs_args();
  args.insert(args.end(), {"--original-input-data", input, "--no-such-flag"});
  EXPECT_EQ(run(args, &text), 2) << text;
  EXPECT_FALSE(any_output_exists());
}

TEST_F(gga_sbc_generator, an_output_naming_the_input_is_refused_and_the_input_kept) {
  const auto bytes = compressible_input(4096);
  const auto input = write_input(bytes);
  std::string text;
  EXPECT_EQ(run({"--original-input-data", input, "--data-1", input, "--data-2", path("d2.sbc"),
                 "--data-p", path("dp.sbc")},
                &text),
            1)
      << text;
  EXPECT_EQ(fs::file_size(input), bytes.size());
}

TEST_F(gga_sbc_generator, flags_can_come_from_a_json_file) {
  const auto input = compressible_input(4096 * 2);
  const auto input_path = write_input(input);
  {
    std::ofstream json(path("config.json"));
    json << "{\"original-input-data\": \"" << input_path << "\", \"block-size\": 4096, "
         << "\"matrix-type\": \"cauchy\", \"data-1\": \"" << path("d1.sbc") << "\", \"data-2\": \""
         << path("d2.sbc") << "\", \"data-p\": \"" << path("dp.sbc") << "\"}";
  }
  std::string text;
  ASSERT_EQ(run({"-j", path("config.json")}, &text), 0) << text;
  expect_outputs_match(*this, input, 4096, accel::test::cauchy_row());
}

}  // namespace
}  // namespace zc::test
