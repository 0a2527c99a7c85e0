// The sbc generator's algorithm (REFERENCE_SPEC §5.3), streaming: for each B-byte block of the
// input (the last one padded with zeros), build the compressed block image (§5.2) with the
// lz4_engine, encode its two halves' parity with the ec_engine, and append the halves and the
// parity to the three .sbc files. In format v2 (docs/FORMATS.md §4.3) each half goes into a slot
// with an entry (generation 1, the block's crc32c, LZ4 or raw, the target's role), a block whose
// image does not fit is stored raw instead of refused, and each file ends with a zero label
// block. Memory stays at a few blocks for any input size. Control path: throws status_error with
// a one-line message; a failed run leaves no output file behind.
#pragma once

#include <cstdint>
#include <functional>

#include "generator_config.hpp"

namespace zc::sbc_generator {

struct generator_result {
  uint64_t input_size = 0;
  uint32_t block_count = 0;         // n: input blocks
  uint32_t target_block_count = 0;  // H-byte blocks in each .sbc file: n (v1), or slots + label
  uint32_t raw_blocks = 0;          // blocks stored raw (v2 only; v1 refuses them)
};

// Called after each block with (blocks done, block count).
using progress_callback = std::function<void(uint32_t done, uint32_t total)>;

// Throws status_error: not_found / io_failed (input cannot be opened or read, outputs cannot be
// written), invalid_value (empty input, not a regular file, in v1 a block that does not compress
// enough: the message names its index and input offset), too_big (outputs over the .sbc limit).
generator_result generate(const generator_config& config, const progress_callback& progress = {});

}  // namespace zc::sbc_generator
