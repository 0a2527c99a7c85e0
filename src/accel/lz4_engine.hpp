// zc::accel::lz4_engine, DOCA's doca_compress for the gga pipeline: turns a plain block into the
// compressed block image of REFERENCE_SPEC §5.2 (docs/FORMATS.md §4) and back, in software
// (liblz4). Tasks run synchronously inside the next progress(), then complete through the engine.
//
//   zc::accel::lz4_engine lz4(pe, {.compress_tasks = 4, .max_block_size = 8192,
//                                  .on_compress_done = ..., .on_compress_error = ...});
//   lz4.start();
//   auto* t = lz4.allocate_compress(plain, image);  // plain: B bytes of data; image: B free
//   lz4.submit(*t);                                 // completes in pe.progress()
//
// Image (B bytes for a B-byte block): u32 BE original_size (= B), u32 BE compressed_size C, the
// data blocks of an LZ4 frame (block-independent, 64 KiB blocks, level 1, no checksums) without
// its frame header and end mark, zero padding, and a u32 trailer 0 at B-4. C + 12 <= B.
//
// Thread rules: the thread of its progress engine. No allocation after construction; the
// constructor takes every buffer the codec needs. Destroy it idle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "accel/internal/software_engine.hpp"
#include "core/buffer.hpp"
#include "core/task.hpp"

namespace zc::accel {

// Image layout (REFERENCE_SPEC §5.2).
inline constexpr size_t image_header_size = 8;   // original_size, compressed_size (BE)
inline constexpr size_t image_trailer_size = 4;  // "reserved", written as 0
inline constexpr size_t image_overhead = image_header_size + image_trailer_size;
// The LZ4 frame's maximum block size in the image (64 KiB blocks, LZ4F_max64KB).
inline constexpr size_t lz4_frame_block_size = 64 * 1024;
// The image's original_size field is 32 bits.
inline constexpr size_t lz4_max_image_size = UINT32_MAX;

// Plain block -> image. The source is the buffer's data section (B bytes, B >= 12); the image
// (exactly B bytes) is appended at the destination's tail. Errors, through the error callback:
// invalid_value (B < 12, B over the engine's max_block_size, less than B bytes of tail room),
// too_big (the block does not compress enough: C + 12 > B; nothing is appended, and
// payload_size() says how big C would have been). The image may be written over the source's own
// memory (the gga write flow rebuilds the image in place): the whole block is compressed into
// the engine's scratch buffer before the image is written.
class lz4_compress_task final : public core::task_base {
 public:
  core::buffer& src() const noexcept { return *src_; }
  core::buffer& dst() const noexcept { return *dst_; }
  void set(core::buffer& src, core::buffer& dst) noexcept {
    src_ = &src;
    dst_ = &dst;
  }
  // C, the LZ4 payload's size, after the task ran (also when it failed with too_big).
  size_t payload_size() const noexcept { return payload_size_; }

 private:
  friend class lz4_engine;
  core::buffer* src_ = nullptr;
  core::buffer* dst_ = nullptr;
  size_t payload_size_ = 0;
};

// Image -> plain block. The source is the image (the buffer's data section, all B bytes of it);
// the B plain bytes are appended at the destination's tail. Every length read from the image is
// checked before use: original_size must equal the image's length, C + 12 <= B, the trailer 0,
// every LZ4 block header inside C, no block over 64 KiB, and the blocks must decompress to exactly
// B bytes. A bad image fails with invalid_value, and so does a destination with less than B bytes
// of tail room; nothing is read outside the image nor written outside the tail room (a failed task
// may have written part of it). Source and destination must not overlap.
class lz4_decompress_task final : public core::task_base {
 public:
  core::buffer& src() const noexcept { return *src_; }
  core::buffer& dst() const noexcept { return *dst_; }
  void set(core::buffer& src, core::buffer& dst) noexcept {
    src_ = &src;
    dst_ = &dst;
  }

 private:
  friend class lz4_engine;
  core::buffer* src_ = nullptr;
  core::buffer* dst_ = nullptr;
};

struct lz4_engine_config {
  uint32_t compress_tasks = 16;
  uint32_t decompress_tasks = 16;
  // The largest block a compress task accepts; sizes the compressor's scratch buffer.
  size_t max_block_size = 64 * 1024;
  core::task_pool<lz4_compress_task>::callback on_compress_done;
  core::task_pool<lz4_compress_task>::callback on_compress_error;
  core::task_pool<lz4_decompress_task>::callback on_decompress_done;
  core::task_pool<lz4_decompress_task>::callback on_decompress_error;
};

namespace internal {
struct lz4_codec;
}

class lz4_engine final : public internal::software_engine {
 public:
  // Throws status_error: bad_config (no tasks at all; max_block_size under 12 bytes or over
  // lz4_max_image_size), no_memory (liblz4 could not make its context).
  lz4_engine(core::progress_engine& engine, lz4_engine_config config);
  ~lz4_engine() override;

  // A task, or nullptr when all of that kind are in flight (or none were configured).
  lz4_compress_task* allocate_compress(core::buffer& src, core::buffer& dst) noexcept;
  lz4_decompress_task* allocate_decompress(core::buffer& src, core::buffer& dst) noexcept;
  // bad_state when the engine is not running; otherwise the task runs in the next progress().
  status submit(lz4_compress_task& task) noexcept;
  status submit(lz4_decompress_task& task) noexcept;

  size_t max_block_size() const noexcept { return config_.max_block_size; }

 private:
  enum kind : uint8_t { compress_kind, decompress_kind };
  status execute(core::task_base& task, uint8_t kind) noexcept override;
  status compress(lz4_compress_task& task) noexcept;
  status decompress(lz4_decompress_task& task) noexcept;

  lz4_engine_config config_;
  std::unique_ptr<internal::lz4_codec> codec_;
  core::task_pool<lz4_compress_task> compress_pool_;
  core::task_pool<lz4_decompress_task> decompress_pool_;
};

}  // namespace zc::accel
