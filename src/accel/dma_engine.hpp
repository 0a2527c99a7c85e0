// zc::accel::dma_engine, DOCA's doca_dma in software: a memcpy task between two buffers, so the
// gga write flow keeps the reference's shape (host block -> service memory, then compress).
//
//   zc::accel::dma_engine dma(pe, {.memcpy_tasks = 8, .on_memcpy_done = ..., ...});
//   dma.start();
//   dma.submit(*dma.allocate_memcpy(host_block, chunk));  // completes in pe.progress()
//
// Thread rules: the thread of its progress engine. No allocation after construction. Destroy it
// idle.
#pragma once

#include <cstdint>

#include "accel/internal/software_engine.hpp"
#include "core/buffer.hpp"
#include "core/task.hpp"

namespace zc::accel {

// Copies the source's data section to the destination's tail and appends it there.
// invalid_value when the destination has less tail room than the source has data.
class dma_memcpy_task final : public core::task_base {
 public:
  core::buffer& src() const noexcept { return *src_; }
  core::buffer& dst() const noexcept { return *dst_; }
  void set(core::buffer& src, core::buffer& dst) noexcept {
    src_ = &src;
    dst_ = &dst;
  }

 private:
  friend class dma_engine;
  core::buffer* src_ = nullptr;
  core::buffer* dst_ = nullptr;
};

struct dma_engine_config {
  uint32_t memcpy_tasks = 16;
  core::task_pool<dma_memcpy_task>::callback on_memcpy_done;
  core::task_pool<dma_memcpy_task>::callback on_memcpy_error;
};

class dma_engine final : public internal::software_engine {
 public:
  // Throws status_error(bad_config) for zero tasks.
  dma_engine(core::progress_engine& engine, dma_engine_config config);
  ~dma_engine() override;

  // A task, or nullptr when all are in flight.
  dma_memcpy_task* allocate_memcpy(core::buffer& src, core::buffer& dst) noexcept;
  // bad_state when the engine is not running; otherwise the task runs in the next progress().
  status submit(dma_memcpy_task& task) noexcept;

 private:
  status execute(core::task_base& task, uint8_t kind) noexcept override;

  dma_engine_config config_;
  core::task_pool<dma_memcpy_task> pool_;
};

}  // namespace zc::accel
