// Storage Binary Content (.sbc) files (REFERENCE_SPEC §5.1, docs/FORMATS.md): a 16-byte header
// (magic, block_size, block_count, all BE) and the content a target starts with. Also loads a
// target's --binary-content, .sbc or raw (§7.2). Control path: throws status_error. The free
// functions are pure functions of their arguments and the file system, safe from any thread; a
// binary_content_file belongs to one thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "storage/unique_fd.hpp"

namespace zc::storage {

inline constexpr uint64_t sbc_magic = 0xDEADF00D1337FADEull;
inline constexpr size_t sbc_header_size = 16;
// The reference's limit on block_size x block_count (2 GiB; exactly 2 GiB is allowed).
inline constexpr uint64_t sbc_max_content_size = uint64_t(1) << 31;

struct sbc_content {
  uint32_t block_size = 0;
  uint32_t block_count = 0;
  std::vector<uint8_t> content;  // block_size * block_count bytes
};

struct sbc_header {
  uint32_t block_size = 0;
  uint32_t block_count = 0;
  uint64_t content_size() const noexcept { return uint64_t(block_size) * block_count; }
};

// An .sbc image decoded in place: its geometry and a view of its content in the caller's bytes.
struct sbc_view {
  sbc_header header;
  std::span<const uint8_t> content;  // header.content_size() bytes
};

// The 16 header bytes.
std::array<uint8_t, sbc_header_size> encode_sbc_header(uint32_t block_size, uint32_t block_count);

// Decodes the header at the start of `bytes` (what a reader got of it; bytes past 16 are not
// looked at). Throws status_error: invalid_value (8 or more bytes that do not start with the
// magic, zero block size or count), io_failed (fewer than 16 bytes), too_big ("Exceeded limit":
// content over 2 GiB). `name` says where the bytes came from, for the error text.
sbc_header decode_sbc_header(std::span<const uint8_t> bytes, std::string_view name);

// Decodes a whole .sbc image held in memory: decode_sbc_header(), then io_failed when the content
// is shorter than the header says. Bytes after the content are ignored, as in the reference.
// Pure: no allocation, no copy.
sbc_view decode_sbc(std::span<const uint8_t> bytes, std::string_view name = ".sbc image");

// True when the file's first 8 bytes, read BE, are the magic; files shorter than 8 bytes are raw.
// Throws status_error(not_found / io_failed) when the file cannot be opened or read.
bool is_sbc(const std::string& path);

// Reads an .sbc file. Throws status_error as decode_sbc() does, and not_found / io_failed when the
// file cannot be opened or read.
sbc_content read_sbc(const std::string& path);

// Writes header + content. Refuses (status_error invalid_value) a content size that differs from
// block_size * block_count (the reference wrote whatever it was given, §8.6), zero sizes, and
// (too_big) content over 2 GiB. Throws io_failed when the file cannot be written.
void write_sbc(const std::string& path, uint32_t block_size, uint32_t block_count,
               std::span<const uint8_t> content);

// Writes an .sbc file as its content is produced, block by block, in constant memory (the sbc
// generator streams inputs of any size). The geometry is declared up front, because the header
// comes first; finish() checks that exactly that many blocks came. A writer destroyed before
// finish() removes its file, so a failed run leaves no half-written .sbc behind.
//
//   sbc_writer out(path, half_block, block_count);
//   for (...) out.append(half);
//   out.finish();
//
// Control path: throws status_error. Thread rules: one thread.
class sbc_writer {
 public:
  // Checks the geometry as write_sbc() does (invalid_value for zero sizes, too_big over 2 GiB),
  // creates the file (io_failed) and writes the header.
  sbc_writer(std::string path, uint32_t block_size, uint32_t block_count);
  ~sbc_writer();
  sbc_writer(const sbc_writer&) = delete;
  sbc_writer& operator=(const sbc_writer&) = delete;

  // Appends one block of exactly block_size bytes; invalid_value for another size or a block past
  // the declared count, io_failed when the file cannot be written.
  void append(std::span<const uint8_t> block);
  // Flushes and closes the file; invalid_value when fewer blocks came than declared (the file is
  // then removed), io_failed when the last write or close fails.
  void finish();

  const std::string& path() const noexcept { return path_; }
  uint32_t blocks_written() const noexcept { return written_; }

 private:
  void flush();

  std::string path_;
  unique_fd fd_;
  uint32_t block_size_ = 0;
  uint32_t block_count_ = 0;
  uint32_t written_ = 0;
  std::vector<uint8_t> pending_;  // bytes not yet written, at most pending_limit
  size_t pending_limit_ = 0;
  bool finished_ = false;
};

// A target's --binary-content (REFERENCE_SPEC §7.2), opened and checked before any memory is
// allocated for it: an .sbc file gives its own geometry (the arguments are then ignored); any
// other file must be exactly block_size * block_count raw bytes. read_into() then reads the
// content straight into the caller's memory (the target's storage), so it is never held twice.
//
//   binary_content_file file(path, block_size, block_count);
//   auto storage = core::memory_map::allocate(file.size(), ...);
//   file.read_into({storage->data(), file.size()});
class binary_content_file {
 public:
  // Throws status_error: not_found / io_failed (cannot open or read, .sbc content shorter than its
  // header says), invalid_value (raw file of the wrong size, bad .sbc header), too_big.
  binary_content_file(const std::string& path, uint32_t block_size, uint32_t block_count);

  bool is_sbc() const noexcept { return sbc_; }
  uint32_t block_size() const noexcept { return geometry_.block_size; }
  uint32_t block_count() const noexcept { return geometry_.block_count; }
  uint64_t size() const noexcept { return geometry_.content_size(); }

  // Reads the content into `out`, which must be size() bytes (invalid_value otherwise). Throws
  // io_failed when the file cannot be read or has become shorter since it was opened.
  void read_into(std::span<uint8_t> out) const;

 private:
  std::string path_;
  unique_fd fd_;
  sbc_header geometry_;
  bool sbc_ = false;
};

// binary_content_file read into a vector: for tools and tests; a target reads into its storage.
sbc_content load_binary_content(const std::string& path, uint32_t block_size, uint32_t block_count);

}  // namespace zc::storage
