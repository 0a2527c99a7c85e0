#include "generator.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>
#include <vector>

#include "accel/ec_engine.hpp"
#include "accel/gga_format.hpp"
#include "accel/lz4_engine.hpp"
#include "core/buffer.hpp"
#include "core/crc32c.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"
#include "core/random.hpp"
#include "storage/sbc_file.hpp"
#include "storage/unique_fd.hpp"

namespace zc::sbc_generator {
namespace {

using namespace std::chrono_literals;

// The engines run their tasks inside progress(); this bounds a wait that cannot really happen.
constexpr auto task_timeout = 60s;

// The generator's write is the first of every block (generation 0 means never written).
constexpr uint64_t initial_generation = 1;

std::string error_text(int err) {
  return std::generic_category().message(err);
}

// Reads up to out.size() bytes; fewer only at the end of the file.
size_t read_block(int fd, std::span<uint8_t> out, const std::string& path) {
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      throw status_error(status::io_failed,
                         fmt::format("Unable to read {}: {}", path, error_text(errno)));
    }
  }
  return got;
}

// The input, opened and sized before anything is written: the .sbc headers need the block count.
struct input_file {
  storage::unique_fd fd;
  uint64_t size = 0;
};

input_file open_input(const std::string& path) {
  input_file in;
  in.fd = storage::unique_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!in.fd) {
    const int err = errno;
    throw status_error(err == ENOENT ? status::not_found : status::io_failed,
                       fmt::format("Unable to open {}: {}", path, error_text(err)));
  }
  struct stat st {};
  if (::fstat(in.fd.get(), &st) != 0)
    throw status_error(status::io_failed,
                       fmt::format("Unable to stat {}: {}", path, error_text(errno)));
  if (!S_ISREG(st.st_mode))
    throw status_error(
        status::invalid_value,
        fmt::format("{} is not a regular file: its size must be known up front", path));
  if (st.st_size == 0)
    throw status_error(status::invalid_value, fmt::format("{} is empty: nothing to store", path));
  in.size = static_cast<uint64_t>(st.st_size);
  return in;
}

// An output that names the input (or another output) would be truncated before it is read.
void refuse_overwriting_input(const generator_config& config, const input_file& in) {
  struct stat input {};
  if (::fstat(in.fd.get(), &input) != 0)
    throw status_error(status::io_failed,
                       fmt::format("Unable to stat {}: {}", config.input, error_text(errno)));
  const std::string* outputs[] = {&config.data_1, &config.data_2, &config.data_p};
  for (size_t i = 0; i < 3; ++i) {
    struct stat st {};
    if (::stat(outputs[i]->c_str(), &st) == 0 && st.st_dev == input.st_dev &&
        st.st_ino == input.st_ino)
      throw status_error(status::invalid_value,
                         fmt::format("{} is the input file: it would be overwritten", *outputs[i]));
    for (size_t j = 0; j < i; ++j)
      if (*outputs[i] == *outputs[j])
        throw status_error(status::invalid_value,
                           fmt::format("{} is named for two outputs", *outputs[i]));
  }
}

// One target's .sbc content as a stream of slots (S bytes each, S = H in v1), cut into the H-byte
// blocks sbc_writer takes; finish() fills the rest of the declared blocks with zeros, the label
// (v2) at the start of the last one.
class slot_stream {
 public:
  slot_stream(const std::string& path, uint32_t half, uint32_t target_blocks)
      : out_(path, half, target_blocks), half_(half), target_blocks_(target_blocks) {
    pending_.reserve(size_t(half) * 2 + accel::gga_entry_size);
  }
  void write(std::span<const uint8_t> slot) {
    pending_.insert(pending_.end(), slot.begin(), slot.end());
    size_t at = 0;
    for (; pending_.size() - at >= half_; at += half_) out_.append({pending_.data() + at, half_});
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(at));
  }
  void finish(std::span<const uint8_t> label = {}) {
    pending_.resize(half_, 0);
    while (out_.blocks_written() < target_blocks_) {
      // The slots end before the label block (gga_slot_layout::target_blocks_for).
      if (!label.empty() && out_.blocks_written() + 1 == target_blocks_)
        std::memcpy(pending_.data(), label.data(), label.size());
      out_.append(pending_);
      std::fill(pending_.begin(), pending_.end(), 0);
    }
    out_.finish();
  }

 private:
  storage::sbc_writer out_;
  uint32_t half_;
  uint32_t target_blocks_;
  std::vector<uint8_t> pending_;  // less than one H-block between writes
};

// A task from a pool of one, which its callback has freed.
template <typename T>
T& take(T* task) {
  if (task == nullptr) throw status_error(status::no_memory, "no free accel task");
  return *task;
}

// Runs the engine until `done`; the software engines finish inside the first progress().
template <typename Done>
void wait_for(core::progress_engine& pe, Done&& done, const char* what) {
  if (!pe.run_until(done, std::chrono::duration_cast<std::chrono::milliseconds>(task_timeout)))
    throw status_error(status::time_out, fmt::format("{} did not complete", what));
}

}  // namespace

generator_result generate(const generator_config& config, const progress_callback& progress) {
  const uint32_t block = config.block_size;
  const uint32_t half = block / 2;
  if (block == 0 || block % block_size_multiple != 0 || block > max_block_size)
    throw status_error(status::invalid_value,
                       fmt::format("Block size {} must be a non-zero multiple of 64", block));
  const bool v2 = config.format == accel::gga_format::v2;
  const auto layout = accel::gga_slot_layout::of(config.format, half);
  input_file in = open_input(config.input);
  const uint64_t blocks = (in.size + block - 1) / block;
  const uint64_t target_blocks = layout.target_blocks_for(blocks);
  if (target_blocks * half > storage::sbc_max_content_size)
    throw status_error(
        status::too_big,
        fmt::format("Exceeded limit: {} ({} bytes) makes {} blocks of {} bytes, {} bytes per "
                    ".sbc file, more than {}",
                    config.input, in.size, blocks, block, target_blocks * half,
                    storage::sbc_max_content_size));
  const auto count = static_cast<uint32_t>(blocks);
  refuse_overwriting_input(config, in);

  // Created before any work, so an unwritable output fails at once; removed again if the run
  // fails (sbc_writer's destructor).
  const auto file_blocks = static_cast<uint32_t>(target_blocks);
  slot_stream data_1(config.data_1, half, file_blocks);
  slot_stream data_2(config.data_2, half, file_blocks);
  slot_stream data_p(config.data_p, half, file_blocks);

  core::progress_engine pe(core::poll_mode::busy);
  status result = status::success;
  size_t payload = 0;
  bool finished = false;
  auto on_compress = [&](accel::lz4_compress_task& t) {
    result = t.result();
    payload = t.payload_size();
    finished = true;
    t.free();
  };
  auto on_create = [&](accel::ec_create_task& t) {
    result = t.result();
    finished = true;
    t.free();
  };
  accel::lz4_engine lz4(pe, {.compress_tasks = 1,
                             .decompress_tasks = 0,
                             .max_block_size = block,
                             .on_compress_done = on_compress,
                             .on_compress_error = on_compress});
  accel::ec_engine ec(pe, {.create_tasks = 1,
                           .recover_tasks = 0,
                           .on_create_done = on_create,
                           .on_create_error = on_create});
  throw_if_failed(lz4.start(), "lz4 engine");
  throw_if_failed(ec.start(), "ec engine");

  // plain: one input block; image: its compressed image, whose halves are D1 and D2; parity: P.
  std::vector<uint8_t> memory(size_t(block) * 2 + half);
  auto map = core::memory_map::wrap(memory.data(), memory.size(), core::access::local_read_write);
  uint8_t* const plain_bytes = memory.data();
  uint8_t* const image_bytes = plain_bytes + block;
  uint8_t* const parity_bytes = image_bytes + block;
  core::buffer_inventory inventory(5);
  core::buffer *plain = nullptr, *image = nullptr, *d1 = nullptr, *d2 = nullptr, *p = nullptr;
  throw_if_failed(inventory.get_by_data(*map, plain_bytes, block, plain), "plain buffer");
  throw_if_failed(inventory.get_by_addr(*map, image_bytes, block, image), "image buffer");
  throw_if_failed(inventory.get_by_data(*map, image_bytes, half, d1), "data_1 buffer");
  throw_if_failed(inventory.get_by_data(*map, image_bytes + half, half, d2), "data_2 buffer");
  throw_if_failed(inventory.get_by_addr(*map, parity_bytes, half, p), "parity buffer");

  // One slot per target and block: the half, and in v2 its entry (FORMATS.md §4.3).
  std::vector<uint8_t> slot(layout.slot());
  auto write_slot = [&](slot_stream& out, accel::gga_role role, const uint8_t* half_bytes,
                        const accel::gga_entry& entry) {
    std::memcpy(slot.data() + layout.half_at(role), half_bytes, half);
    if (v2) {
      accel::gga_entry e = entry;
      e.role = role;
      accel::encode_gga_entry(e, std::span<uint8_t, accel::gga_entry_size>(
                                     slot.data() + layout.entry_at(role), accel::gga_entry_size));
    }
    out.write(slot);
  };
  uint32_t raw_blocks = 0;

  auto stop_engines = [&] {
    lz4.stop();
    ec.stop();
    pe.progress();
  };
  try {
    for (uint32_t i = 0; i < count; ++i) {
      const uint64_t offset = uint64_t(i) * block;
      const size_t expected = static_cast<size_t>(std::min<uint64_t>(block, in.size - offset));
      const size_t got = read_block(in.fd.get(), {plain_bytes, expected}, config.input);
      if (got != expected)
        throw status_error(status::io_failed,
                           fmt::format("{} shrank while being read: {} bytes at offset {}, "
                                       "expected {}",
                                       config.input, got, offset, expected));
      // The last block is padded with zeros (REFERENCE_SPEC §5.3 step 5).
      std::memset(plain_bytes + expected, 0, block - expected);

      image->set_data(image_bytes, 0);
      finished = false;
      throw_if_failed(lz4.submit(take(lz4.allocate_compress(*plain, *image))), "lz4 submit");
      wait_for(
          pe, [&] { return finished; }, "LZ4 compression");
      accel::gga_entry entry{.generation = initial_generation,
                             .crc = v2 ? core::crc32c({plain_bytes, block}) : 0,
                             .stored_as = accel::gga_stored_as::lz4};
      if (result == status::too_big && v2) {
        // The image cannot hold it: v2 stores the plain block itself as D1 | D2.
        std::memcpy(image_bytes, plain_bytes, block);
        entry.stored_as = accel::gga_stored_as::raw;
        ++raw_blocks;
      } else if (result == status::too_big) {
        throw status_error(
            status::invalid_value,
            fmt::format("Data was not compressible enough: block {} (input offset {}) "
                        "compresses to {} bytes, and a {}-byte block image holds at most {}",
                        i, offset, payload, block, block - accel::image_overhead));
      } else {
        throw_if_failed(result, fmt::format("LZ4 compression of block {} failed", i));
      }

      p->set_data(parity_bytes, 0);
      finished = false;
      throw_if_failed(ec.submit(take(ec.allocate_create(config.matrix, *d1, *d2, *p))),
                      "ec submit");
      wait_for(
          pe, [&] { return finished; }, "EC create");
      throw_if_failed(result, fmt::format("EC create of block {} failed", i));
      if (p->data_length() != half)
        throw status_error(status::unexpected, "EC create returned an invalid result");

      write_slot(data_1, accel::gga_role::data_1, image_bytes, entry);
      write_slot(data_2, accel::gga_role::data_2, image_bytes + half, entry);
      write_slot(data_p, accel::gga_role::parity, parity_bytes, entry);
      if (progress) progress(i + 1, count);
    }
    if (v2) {
      // One volume: a fresh id, each target's role (FORMATS.md §4.3).
      accel::gga_label label{.matrix = static_cast<uint8_t>(config.matrix),
                             .half = half,
                             .blocks = count,
                             .volume = core::random_nonzero_u64()};
      std::array<uint8_t, accel::gga_label_size> bytes{};
      slot_stream* outs[] = {&data_1, &data_2, &data_p};
      for (uint32_t r = 0; r < accel::gga_role_count; ++r) {
        label.role = accel::gga_role(r);
        accel::encode_gga_label(label, bytes);
        outs[r]->finish(bytes);
      }
    } else {
      data_1.finish();
      data_2.finish();
      data_p.finish();
    }
  } catch (...) {
    stop_engines();
    throw;
  }
  stop_engines();
  return {in.size, count, file_blocks, raw_blocks};
}

}  // namespace zc::sbc_generator
