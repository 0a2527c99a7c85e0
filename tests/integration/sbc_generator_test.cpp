// zcstore_gga_offload_sbc_generator as a child process, the way a user runs it. Format v1: its
// three .sbc files checked byte for byte against images and parity built here from first
// principles (liblz4's own frame output minus its header and end mark; GF(2^8) arithmetic
// written in the test). Format v2 (the default, docs/FORMATS.md §4.3): every block read back
// from every pair of its slots, as a reader would (entries decoded and judged, the image decoded
// by the lz4 engine or taken raw, each half rebuilt by the ec engine), and the files' geometry.
// And its refusals (incompressible input in v1 naming the block, bad block sizes, a missing
// input, bad flags), each one line and a non-zero exit with no output file left behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "accel/ec_engine.hpp"
#include "accel/gga_format.hpp"
#include "accel/lz4_engine.hpp"
#include "core/crc32c.hpp"
#include "core/progress_engine.hpp"
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
  args.insert(args.end(),
              {"--original-input-data", write_input(input), "-d", "03:00.0", "--format", "v1"});
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
                           "--matrix-type", "cauchy", "--format", "v1"});
  std::string text;
  ASSERT_EQ(run(args, &text), 0) << text;
  expect_outputs_match(*this, input, 8192, accel::test::cauchy_row());
}

TEST_F(gga_sbc_generator, v1_refuses_an_incompressible_block_with_its_index_and_offset) {
  auto input = compressible_input(4096 * 2);
  const auto noise = accel::test::random_bytes(4096, 42);
  input.insert(input.end(), noise.begin(), noise.end());
  const auto more = compressible_input(4096);
  input.insert(input.end(), more.begin(), more.end());
  auto args = outputs_args();
  args.insert(args.end(), {"--original-input-data", write_input(input), "--format", "v1"});
  std::string text;
  EXPECT_EQ(run(args, &text), 1) << text;
  EXPECT_NE(text.find("not compressible enough: block 2 (input offset 8192)"), std::string::npos)
      << text;
  EXPECT_FALSE(any_output_exists());
}

// What a reader of v2 images needs from the accel layer: the lz4 engine's decoder for a stored
// image, and the ec engine's recovery of a lost half.
class v2_reader {
 public:
  explicit v2_reader(uint32_t block)
      : lz4_(pe_, {.compress_tasks = 0,
                   .decompress_tasks = 1,
                   .max_block_size = block,
                   .on_decompress_done = [this](core::task_base& t) { finish(t); },
                   .on_decompress_error = [this](core::task_base& t) { finish(t); }}),
        ec_(pe_, {.create_tasks = 0,
                  .recover_tasks = 1,
                  .on_recover_done = [this](core::task_base& t) { finish(t); },
                  .on_recover_error = [this](core::task_base& t) { finish(t); }}) {
    EXPECT_EQ(lz4_.start(), status::success);
    EXPECT_EQ(ec_.start(), status::success);
  }
  ~v2_reader() {
    lz4_.stop();
    ec_.stop();
    pe_.progress();
  }

  std::vector<uint8_t> decompress(const std::vector<uint8_t>& image) {
    core::buffer& out = bufs_.empty(image.size());
    EXPECT_EQ(lz4_.submit(*lz4_.allocate_decompress(bufs_.with_data(image), out)), status::success);
    return result(out, "lz4 decompress");
  }
  // The half at `missing` (0 D1, 1 D2) from the other one and the parity.
  std::vector<uint8_t> recover(accel::ec_matrix m, uint32_t missing,
                               const std::vector<uint8_t>& other,
                               const std::vector<uint8_t>& parity) {
    core::buffer& out = bufs_.empty(parity.size());
    EXPECT_EQ(ec_.submit(*ec_.allocate_recover(m, missing, bufs_.with_data(other),
                                               bufs_.with_data(parity), out)),
              status::success);
    return result(out, "ec recover");
  }

 private:
  void finish(core::task_base& t) {
    last_ = t.result();
    done_ = true;
    t.free();
  }
  std::vector<uint8_t> result(const core::buffer& out, const char* what) {
    done_ = false;
    pe_.progress();
    EXPECT_TRUE(done_) << what;
    EXPECT_EQ(last_, status::success) << what;
    return accel::test::buffers::data_of(out);
  }

  core::progress_engine pe_{core::poll_mode::busy};
  accel::lz4_engine lz4_;
  accel::ec_engine ec_;
  accel::test::buffers bufs_;
  status last_ = status::success;
  bool done_ = false;
};

// Reads the three v2 files back the way FORMATS.md §4.3 says a reader must, every block from each
// of the three pairs of its slots, and compares with the input. Counts the blocks stored raw in
// `raw`.
void expect_v2_outputs_decode(const gga_sbc_generator& t, const std::vector<uint8_t>& input,
                              uint32_t block, accel::ec_matrix matrix, size_t& raw) {
  const uint32_t half = block / 2;
  const size_t count = (input.size() + block - 1) / block;
  const auto layout = accel::gga_slot_layout::of(accel::gga_format::v2, half);
  const uint64_t target_blocks = layout.target_blocks_for(count);
  const auto row = matrix == accel::ec_matrix::cauchy ? accel::test::cauchy_row()
                                                      : accel::test::vandermonde_row();
  const std::array<std::string, 3> paths{t.path("d1.sbc"), t.path("d2.sbc"), t.path("dp.sbc")};
  const std::array<accel::gga_role, 3> roles{accel::gga_role::data_1, accel::gga_role::data_2,
                                             accel::gga_role::parity};
  std::array<storage::sbc_content, 3> files;
  std::array<uint64_t, 3> volumes{};
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(fs::file_size(paths[r]), storage::sbc_header_size + uint64_t(half) * target_blocks);
    files[r] = storage::read_sbc(paths[r]);
    EXPECT_EQ(files[r].block_size, half);
    EXPECT_EQ(files[r].block_count, target_blocks);
    EXPECT_EQ(files[r].content.size(), uint64_t(half) * target_blocks);
    if (files[r].content.size() < count * layout.slot()) {
      ADD_FAILURE() << paths[r] << " cannot hold " << count << " slots";
      return;
    }
    // After the last slot: zeros up to the label block, which starts with the label.
    const auto label_at = static_cast<std::ptrdiff_t>(layout.label_at(target_blocks));
    const auto tail = files[r].content.begin() + static_cast<std::ptrdiff_t>(count * layout.slot());
    EXPECT_TRUE(std::all_of(tail, files[r].content.begin() + label_at, [](uint8_t b) {
      return b == 0;
    })) << paths[r];
    EXPECT_TRUE(std::all_of(files[r].content.begin() + label_at + accel::gga_label_size,
                            files[r].content.end(), [](uint8_t b) { return b == 0; }))
        << paths[r];
    accel::gga_label label;
    ASSERT_EQ(
        accel::decode_gga_label(std::span<const uint8_t, accel::gga_label_size>(
                                    files[r].content.data() + label_at, accel::gga_label_size),
                                label),
        accel::gga_label_state::valid)
        << paths[r];
    EXPECT_EQ(label.role, roles[r]);
    EXPECT_EQ(label.matrix, static_cast<uint8_t>(matrix));
    EXPECT_EQ(label.half, half);
    EXPECT_EQ(label.blocks, count);
    EXPECT_NE(label.volume, 0u);
    volumes[r] = label.volume;
  }
  // One volume.
  EXPECT_EQ(volumes[0], volumes[1]);
  EXPECT_EQ(volumes[0], volumes[2]);

  v2_reader reader(block);
  raw = 0;
  for (size_t i = 0; i < count; ++i) {
    SCOPED_TRACE("block " + std::to_string(i));
    std::vector<uint8_t> plain(block, 0);  // the last block padded with zeros
    const size_t n = std::min<size_t>(block, input.size() - i * block);
    std::copy_n(input.begin() + static_cast<std::ptrdiff_t>(i * block), n, plain.begin());
    const uint32_t crc = core::crc32c(plain);

    std::array<accel::gga_entry, 3> entries;
    std::array<std::vector<uint8_t>, 3> halves;
    for (size_t r = 0; r < 3; ++r) {
      const uint8_t* slot = files[r].content.data() + i * layout.slot();
      ASSERT_EQ(
          accel::decode_gga_entry(std::span<const uint8_t, accel::gga_entry_size>(
                                      slot + layout.entry_at(roles[r]), accel::gga_entry_size),
                                  roles[r], entries[r]),
          status::success)
          << paths[r];
      EXPECT_EQ(entries[r].generation, 1u);
      EXPECT_EQ(entries[r].crc, crc);
      const uint8_t* h = slot + layout.half_at(roles[r]);
      halves[r].assign(h, h + half);
    }
    const auto verdict = accel::judge_gga_pair(entries[0], entries[1]);
    EXPECT_EQ(accel::judge_gga_pair(entries[0], entries[2]), verdict);
    EXPECT_EQ(accel::judge_gga_pair(entries[1], entries[2]), verdict);
    EXPECT_EQ(halves[2], accel::test::parity(row, halves[0], halves[1]));
    // Each pair gives the stored block D1 | D2: read directly, or with one half rebuilt.
    const std::vector<uint8_t> d1_again = reader.recover(matrix, 0, halves[1], halves[2]);
    const std::vector<uint8_t> d2_again = reader.recover(matrix, 1, halves[0], halves[2]);
    EXPECT_EQ(d1_again, halves[0]);
    EXPECT_EQ(d2_again, halves[1]);
    const std::array<std::pair<const std::vector<uint8_t>*, const std::vector<uint8_t>*>, 3> pairs{
        {{&halves[0], &halves[1]}, {&d1_again, &halves[1]}, {&halves[0], &d2_again}}};
    for (const auto& [d1, d2] : pairs) {
      std::vector<uint8_t> stored(*d1);
      stored.insert(stored.end(), d2->begin(), d2->end());
      std::vector<uint8_t> block_back;
      if (verdict == accel::gga_pair_verdict::lz4) {
        EXPECT_EQ(stored, accel::test::reference_image(plain));  // the image of v1, §4.1
        block_back = reader.decompress(stored);
      } else {
        ASSERT_EQ(verdict, accel::gga_pair_verdict::raw);
        // Raw only when the image does not fit.
        EXPECT_TRUE(accel::test::reference_image(plain).empty());
        block_back = stored;
      }
      EXPECT_EQ(block_back, plain);
      EXPECT_EQ(core::crc32c(block_back), entries[0].crc);
    }
    if (verdict == accel::gga_pair_verdict::raw) ++raw;
  }
}

// Compressible text with one block of noise in the middle: both kinds of storage in one file.
std::vector<uint8_t> mixed_input(size_t block) {
  auto input = compressible_input(block * 2);
  const auto noise = accel::test::random_bytes(block, 42);
  input.insert(input.end(), noise.begin(), noise.end());
  const auto more = compressible_input(block * 2 + block / 2);
  input.insert(input.end(), more.begin(), more.end());
  return input;
}

TEST_F(gga_sbc_generator, v2_is_the_default_and_every_pair_of_slots_reads_back_the_input) {
  const auto input = mixed_input(4096);  // 5.5 blocks, the 3rd incompressible
  auto args = outputs_args();
  args.insert(args.end(), {"--original-input-data", write_input(input)});
  std::string text;
  ASSERT_EQ(run(args, &text), 0) << text;
  // 6 slots of 2064 bytes: 12384 bytes, 7 blocks of 2048, then the label block.
  EXPECT_NE(text.find("\tBlock size: 4096\n\tOut block count: 6\n\tFormat: v2\n\tTarget block "
                      "count: 8\n\tStored raw: 1 blocks\n"),
            std::string::npos)
      << text;
  size_t raw = 0;
  expect_v2_outputs_decode(*this, input, 4096, accel::ec_matrix::vandermonde, raw);
  EXPECT_EQ(raw, 1u);
}

TEST_F(gga_sbc_generator, v2_with_cauchy_parity_rebuilds_both_halves) {
  const auto input = mixed_input(8192);
  auto args = outputs_args();
  args.insert(args.end(), {"--original-input-data", write_input(input), "--block-size", "8192",
                           "--matrix-type", "cauchy", "--format", "v2"});
  std::string text;
  ASSERT_EQ(run(args, &text), 0) << text;
  size_t raw = 0;
  expect_v2_outputs_decode(*this, input, 8192, accel::ec_matrix::cauchy, raw);
  EXPECT_EQ(raw, 1u);
}

TEST_F(gga_sbc_generator, random_input_is_stored_raw_in_v2_and_refused_in_v1) {
  const auto input = accel::test::random_bytes(4096 * 3, 7);
  const auto input_path = write_input(input);
  auto args = outputs_args();
  args.insert(args.end(), {"--original-input-data", input_path});
  std::string text;
  ASSERT_EQ(run(args, &text), 0) << text;
  EXPECT_NE(text.find("\tStored raw: 3 blocks\n"), std::string::npos) << text;
  size_t raw = 0;
  expect_v2_outputs_decode(*this, input, 4096, accel::ec_matrix::vandermonde, raw);
  EXPECT_EQ(raw, 3u);

  for (const char* name : {"d1.sbc", "d2.sbc", "dp.sbc"}) fs::remove(path(name));
  args.insert(args.end(), {"--format", "v1"});
  EXPECT_EQ(run(args, &text), 1) << text;
  EXPECT_NE(text.find("not compressible enough: block 0 (input offset 0)"), std::string::npos)
      << text;
  EXPECT_FALSE(any_output_exists());
}

TEST_F(gga_sbc_generator, v2_of_one_byte_is_one_slot_and_the_label_block) {
  const std::vector<uint8_t> input{0x5A};
  auto args = outputs_args();
  args.insert(args.end(), {"--original-input-data", write_input(input), "--block-size", "64"});
  std::string text;
  ASSERT_EQ(run(args, &text), 0) << text;
  for (const char* name : {"d1.sbc", "d2.sbc", "dp.sbc"})
    EXPECT_EQ(fs::file_size(path(name)), 16u + 32u * 3u) << name;  // 48-byte slot, 16, label
  size_t raw = 0;
  expect_v2_outputs_decode(*this, input, 64, accel::ec_matrix::vandermonde, raw);
  EXPECT_EQ(raw, 0u);
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
  args.insert(args.end(), {"--original-input-data", input, "--format", "v3"});
  EXPECT_EQ(run(args, &text), 2) << text;
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
         << "\"matrix-type\": \"cauchy\", \"format\": \"v1\", \"data-1\": \"" << path("d1.sbc")
         << "\", \"data-2\": \"" << path("d2.sbc") << "\", \"data-p\": \"" << path("dp.sbc")
         << "\"}";
  }
  std::string text;
  ASSERT_EQ(run({"-j", path("config.json")}, &text), 0) << text;
  expect_outputs_match(*this, input, 4096, accel::test::cauchy_row());
}

}  // namespace
}  // namespace zc::test
