// Storage Binary Content (.sbc) files (REFERENCE_SPEC §5.1, docs/FORMATS.md): a 16-byte header
// (magic, block_size, block_count, all BE) and the content a target starts with. Also loads a
// target's --binary-content, .sbc or raw (§7.2). Control path: throws status_error. Pure
// functions of their arguments and the file system; safe from any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.hpp"

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

// The 16 header bytes.
std::array<uint8_t, sbc_header_size> encode_sbc_header(uint32_t block_size, uint32_t block_count);

// True when the file's first 8 bytes, read BE, are the magic; files shorter than 8 bytes are raw.
// Throws status_error(not_found / io_failed) when the file cannot be opened or read.
bool is_sbc(const std::string& path);

// Reads an .sbc file. Throws status_error: invalid_value (not .sbc, zero block size or count),
// too_big ("Exceeded limit": content over 2 GiB), io_failed (cannot read, shorter than the header
// says). Bytes after the content are ignored, as in the reference.
sbc_content read_sbc(const std::string& path);

// Writes header + content. Refuses (status_error invalid_value) a content size that differs from
// block_size * block_count (the reference wrote whatever it was given, §8.6), zero sizes, and
// (too_big) content over 2 GiB. Throws io_failed when the file cannot be written.
void write_sbc(const std::string& path, uint32_t block_size, uint32_t block_count,
               std::span<const uint8_t> content);

// A target's --binary-content: an .sbc file gives its own geometry (the arguments are then
// ignored); any other file must be exactly block_size * block_count raw bytes.
sbc_content load_binary_content(const std::string& path, uint32_t block_size, uint32_t block_count);

}  // namespace zc::storage
