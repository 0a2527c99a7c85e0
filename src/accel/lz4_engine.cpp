#include "accel/lz4_engine.hpp"

#include <lz4.h>
#include <lz4frame.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/bytes.hpp"
#include "core/log.hpp"

namespace zc::accel {
namespace internal {

// The LZ4 frame settings of REFERENCE_SPEC §5.2: the image holds this frame's data blocks.
LZ4F_preferences_t image_preferences() noexcept {
  LZ4F_preferences_t p;
  std::memset(&p, 0, sizeof(p));
  p.frameInfo.blockSizeID = LZ4F_max64KB;
  p.frameInfo.blockMode = LZ4F_blockIndependent;
  p.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum;
  p.frameInfo.blockChecksumFlag = LZ4F_noBlockChecksum;
  p.frameInfo.frameType = LZ4F_frame;
  p.compressionLevel = 1;
  p.autoFlush = 1;
  return p;
}

// liblz4's frame compressor and a scratch buffer for one whole frame of the largest block. The
// frame API, not our own loop over LZ4_compress_*, so the blocks are liblz4's frame blocks by
// construction (raw-block fallback, block split, acceleration for level 1).
struct lz4_codec {
  LZ4F_cctx* cctx = nullptr;
  LZ4F_preferences_t prefs = image_preferences();
  std::vector<uint8_t> scratch;

  ~lz4_codec() {
    if (cctx != nullptr) LZ4F_freeCompressionContext(cctx);
  }

  // Compresses `length` bytes into scratch: returns the size of the data blocks (frame header
  // and end mark left out), or 0 on a liblz4 error.
  size_t frame_blocks(const uint8_t* src, size_t length) noexcept {
    // The frame header goes to the scratch buffer and is overwritten by the blocks.
    size_t r = LZ4F_compressBegin(cctx, scratch.data(), scratch.size(), &prefs);
    if (LZ4F_isError(r)) return 0;
    const size_t blocks =
        LZ4F_compressUpdate(cctx, scratch.data(), scratch.size(), src, length, nullptr);
    if (LZ4F_isError(blocks)) return 0;
    return blocks;
  }
  // Ends the frame (its end mark lands after the blocks and is not used), so the context is ready
  // for the next one. Called once the blocks have been copied out.
  void end_frame(size_t blocks) noexcept {
    LZ4F_compressEnd(cctx, scratch.data() + blocks, scratch.size() - blocks, nullptr);
  }
};

}  // namespace internal

namespace {

constexpr uint32_t lz4_uncompressed_flag = 0x80000000u;
constexpr size_t lz4_block_header_size = 4;

uint32_t load_le32(const uint8_t* p) noexcept {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

}  // namespace

lz4_engine::lz4_engine(core::progress_engine& engine, lz4_engine_config config)
    : internal::software_engine(engine),
      config_(std::move(config)),
      codec_(std::make_unique<internal::lz4_codec>()) {
  if (config_.compress_tasks == 0 && config_.decompress_tasks == 0)
    throw status_error(status::bad_config, "lz4 engine needs tasks");
  if (config_.max_block_size < image_overhead || config_.max_block_size > lz4_max_image_size)
    throw status_error(status::bad_config, "lz4 engine: max_block_size out of range");
  if (LZ4F_isError(LZ4F_createCompressionContext(&codec_->cctx, LZ4F_VERSION)))
    throw status_error(status::no_memory, "lz4 engine: cannot create an LZ4F context");
  codec_->scratch.resize(LZ4F_compressBound(config_.max_block_size, &codec_->prefs) +
                         LZ4F_HEADER_SIZE_MAX);
  // liblz4 allocates its compression state on the first frame: do it now, not on the data path.
  const uint8_t warm_up[image_overhead] = {};
  codec_->end_frame(codec_->frame_blocks(warm_up, sizeof(warm_up)));
  compress_pool_.configure(*this, config_.compress_tasks, config_.on_compress_done,
                           config_.on_compress_error);
  decompress_pool_.configure(*this, config_.decompress_tasks, config_.on_decompress_done,
                             config_.on_decompress_error);
  reserve_queue(config_.compress_tasks + config_.decompress_tasks);
}

lz4_engine::~lz4_engine() {
  if (state() != core::context_state::idle)
    ZC_SDK_LOG_ERROR("lz4 engine destroyed while {}; stop it first", to_string(state()));
}

lz4_compress_task* lz4_engine::allocate_compress(core::buffer& src, core::buffer& dst) noexcept {
  lz4_compress_task* t = compress_pool_.allocate();
  if (t != nullptr) t->set(src, dst);
  return t;
}

lz4_decompress_task* lz4_engine::allocate_decompress(core::buffer& src,
                                                     core::buffer& dst) noexcept {
  lz4_decompress_task* t = decompress_pool_.allocate();
  if (t != nullptr) t->set(src, dst);
  return t;
}

status lz4_engine::submit(lz4_compress_task& task) noexcept {
  if (task.src_ == nullptr || task.dst_ == nullptr) return status::invalid_value;
  return enqueue(task, compress_kind);
}

status lz4_engine::submit(lz4_decompress_task& task) noexcept {
  if (task.src_ == nullptr || task.dst_ == nullptr) return status::invalid_value;
  return enqueue(task, decompress_kind);
}

status lz4_engine::execute(core::task_base& task, uint8_t kind) noexcept {
  return kind == compress_kind ? compress(static_cast<lz4_compress_task&>(task))
                               : decompress(static_cast<lz4_decompress_task&>(task));
}

status lz4_engine::compress(lz4_compress_task& task) noexcept {
  task.payload_size_ = 0;
  const core::buffer& src = *task.src_;
  core::buffer& dst = *task.dst_;
  const size_t block = src.data_length();
  if (block < image_overhead || block > config_.max_block_size || dst.tail_room() < block)
    return status::invalid_value;
  const size_t payload = codec_->frame_blocks(src.data(), block);
  if (payload == 0) return status::invalid_value;
  task.payload_size_ = payload;
  // The reference's constraint (§5.2): the image has room for C bytes after the header and
  // before the trailer. An incompressible block cannot be stored in this format (§8.1).
  if (payload > block - image_overhead) {
    codec_->end_frame(payload);
    return status::too_big;
  }
  uint8_t* image = dst.tail();
  store_be32(image, static_cast<uint32_t>(block));
  store_be32(image + 4, static_cast<uint32_t>(payload));
  std::memcpy(image + image_header_size, codec_->scratch.data(), payload);
  codec_->end_frame(payload);
  std::memset(image + image_header_size + payload, 0, block - image_header_size - payload);
  dst.append(block);
  return status::success;
}

status lz4_engine::decompress(lz4_decompress_task& task) noexcept {
  const core::buffer& src = *task.src_;
  core::buffer& dst = *task.dst_;
  const uint8_t* image = src.data();
  const size_t length = src.data_length();
  if (length < image_overhead || length > lz4_max_image_size) return status::invalid_value;
  const uint32_t original_size = load_be32(image);
  const uint32_t payload_size = load_be32(image + 4);
  // Every writer (ours, the reference's generator and write flow) stores B here; a reader that
  // trusted it blindly could be told to write past the block (REFERENCE_SPEC §8.4).
  if (original_size != length || dst.tail_room() < original_size) return status::invalid_value;
  if (payload_size > length - image_overhead) return status::invalid_value;
  if (load_be32(image + length - image_trailer_size) != 0) return status::invalid_value;

  const uint8_t* in = image + image_header_size;
  const uint8_t* const in_end = in + payload_size;
  uint8_t* const out_begin = dst.tail();
  uint8_t* out = out_begin;
  uint8_t* const out_end = out_begin + original_size;
  while (in != in_end) {
    if (static_cast<size_t>(in_end - in) < lz4_block_header_size) return status::invalid_value;
    const uint32_t header = load_le32(in);
    in += lz4_block_header_size;
    const size_t size = header & ~lz4_uncompressed_flag;
    // A zero size is the frame's end mark, which the image leaves out.
    if (size == 0 || size > lz4_frame_block_size || size > static_cast<size_t>(in_end - in))
      return status::invalid_value;
    const size_t room = std::min(static_cast<size_t>(out_end - out), lz4_frame_block_size);
    if ((header & lz4_uncompressed_flag) != 0) {
      if (size > room) return status::invalid_value;
      std::memcpy(out, in, size);
      out += size;
    } else {
      const int produced =
          LZ4_decompress_safe(reinterpret_cast<const char*>(in), reinterpret_cast<char*>(out),
                              static_cast<int>(size), static_cast<int>(room));
      if (produced < 0) return status::invalid_value;
      out += produced;
    }
    in += size;
  }
  if (out != out_end) return status::invalid_value;
  dst.append(original_size);
  return status::success;
}

}  // namespace zc::accel
