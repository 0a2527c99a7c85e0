// libFuzzer harness for the compressed block image decoder (accel::lz4_engine's decompress task,
// docs/FORMATS.md §4): the input is an image read from storage. The destination is a heap block
// of exactly the image's length, so a write past it is a sanitizer finding. A decoded image must
// give exactly its length in bytes, and compressing those bytes again must give an image that
// decodes to the same bytes (the decoder may accept other encoders' images; its output is what
// must round-trip). Any crash, sanitizer report or abort is a finding.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "accel/lz4_engine.hpp"
#include "core/buffer.hpp"
#include "core/memory_map.hpp"
#include "core/progress_engine.hpp"

namespace {

using namespace zc;

void check(bool condition) {
  if (!condition) std::abort();
}

constexpr size_t max_image = 256 * 1024;

struct harness {
  core::progress_engine pe{core::poll_mode::busy};
  status last = status::success;
  accel::lz4_engine lz4{pe,
                        {.compress_tasks = 1,
                         .decompress_tasks = 1,
                         .max_block_size = max_image,
                         .on_compress_done = [this](auto& t) { done(t); },
                         .on_compress_error = [this](auto& t) { done(t); },
                         .on_decompress_done = [this](auto& t) { done(t); },
                         .on_decompress_error = [this](auto& t) { done(t); }}};
  core::buffer_inventory inventory{8};
  harness() { check(lz4.start() == status::success); }
  ~harness() {
    lz4.stop();
    pe.progress();
  }
  void done(core::task_base& t) {
    last = t.result();
    t.free();
  }
  // Runs one task over [in, in+n) into [out, out+n); returns its status and the output length.
  template <bool Compress>
  status run(const uint8_t* in, uint8_t* out, size_t n, size_t& produced) {
    auto in_map =
        core::memory_map::wrap(const_cast<uint8_t*>(in), n, core::access::local_read_write);
    auto out_map = core::memory_map::wrap(out, n, core::access::local_read_write);
    core::buffer* src = nullptr;
    core::buffer* dst = nullptr;
    check(inventory.get_by_data(*in_map, const_cast<uint8_t*>(in), n, src) == status::success);
    check(inventory.get_by_addr(*out_map, out, n, dst) == status::success);
    if constexpr (Compress) {
      check(lz4.submit(*lz4.allocate_compress(*src, *dst)) == status::success);
    } else {
      check(lz4.submit(*lz4.allocate_decompress(*src, *dst)) == status::success);
    }
    pe.progress();
    produced = dst->data_length();
    src->release();
    dst->release();
    return last;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static harness h;
  if (size == 0 || size > max_image) return 0;
  // Exact-size heap copies: ASan sees any byte read or written outside them.
  auto image = std::make_unique<uint8_t[]>(size);
  std::memcpy(image.get(), data, size);
  auto plain = std::make_unique<uint8_t[]>(size);
  size_t produced = 0;
  if (h.run<false>(image.get(), plain.get(), size, produced) != status::success) {
    check(produced == 0);
    return 0;
  }
  check(produced == size);
  auto again = std::make_unique<uint8_t[]>(size);
  if (h.run<true>(plain.get(), again.get(), size, produced) != status::success) return 0;
  check(produced == size);
  auto back = std::make_unique<uint8_t[]>(size);
  check(h.run<false>(again.get(), back.get(), size, produced) == status::success);
  check(produced == size && std::memcmp(back.get(), plain.get(), size) == 0);
  return 0;
}
