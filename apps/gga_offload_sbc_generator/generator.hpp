// The sbc generator's algorithm (REFERENCE_SPEC §5.3), streaming: for each B-byte block of the
// input (the last one padded with zeros), build the compressed block image (§5.2) with the
// lz4_engine, encode its two halves' parity with the ec_engine, and append the halves and the
// parity to the three .sbc files. Memory stays at a few blocks for any input size. Control
// path: throws status_error with a one-line message; a failed run leaves no output file behind.
#pragma once

#include <cstdint>
#include <functional>

#include "generator_config.hpp"

namespace zc::sbc_generator {

struct generator_result {
  uint64_t input_size = 0;
  uint32_t block_count = 0;  // n: input blocks, and blocks in each .sbc file
};

// Called after each block with (blocks done, block count).
using progress_callback = std::function<void(uint32_t done, uint32_t total)>;

// Throws status_error: not_found / io_failed (input cannot be opened or read, outputs cannot be
// written), invalid_value (empty input, not a regular file, a block that does not compress
// enough: the message names its index and input offset), too_big (outputs over the .sbc limit).
generator_result generate(const generator_config& config, const progress_callback& progress = {});

}  // namespace zc::sbc_generator
