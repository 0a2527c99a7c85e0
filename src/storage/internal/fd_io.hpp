// The loops around read(2) and write(2) that storage's files use, with the kernel call as a
// parameter so tests can stand in for the cases a real file rarely gives (a write that takes no
// byte). Control path: throws status_error. Thread rules: none of their own.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace zc::storage::internal {

// errno as text, for the messages storage's errors carry.
std::string error_text(int err);

using write_function = ssize_t (*)(int fd, const void* data, size_t length);

// Writes all of `data`. Throws status_error(io_failed) naming `path` on an error, and on a write
// that takes no byte: retrying it would spin forever.
void write_fully(int fd, std::span<const uint8_t> data, const std::string& path,
                 write_function write = nullptr);

// Reads up to out.size() bytes from `offset`; returns how many (fewer only at end of file).
// Throws status_error(io_failed) naming `path` on an error.
size_t read_fully_at(int fd, std::span<uint8_t> out, uint64_t offset, const std::string& path);

}  // namespace zc::storage::internal
