#include "accel/dma_engine.hpp"

#include <cstring>

#include "core/log.hpp"

namespace zc::accel {

dma_engine::dma_engine(core::progress_engine& engine, dma_engine_config config)
    : internal::software_engine(engine), config_(std::move(config)) {
  if (config_.memcpy_tasks == 0) throw status_error(status::bad_config, "dma engine needs tasks");
  pool_.configure(*this, config_.memcpy_tasks, config_.on_memcpy_done, config_.on_memcpy_error);
  reserve_queue(config_.memcpy_tasks);
}

dma_engine::~dma_engine() {
  if (state() != core::context_state::idle)
    ZC_SDK_LOG_ERROR("dma engine destroyed while {}; stop it first", to_string(state()));
}

dma_memcpy_task* dma_engine::allocate_memcpy(core::buffer& src, core::buffer& dst) noexcept {
  dma_memcpy_task* t = pool_.allocate();
  if (t != nullptr) t->set(src, dst);
  return t;
}

status dma_engine::submit(dma_memcpy_task& task) noexcept {
  if (task.src_ == nullptr || task.dst_ == nullptr) return status::invalid_value;
  return enqueue(task, 0);
}

status dma_engine::execute(core::task_base& task, uint8_t) noexcept {
  auto& t = static_cast<dma_memcpy_task&>(task);
  const size_t length = t.src_->data_length();
  if (t.dst_->tail_room() < length) return status::invalid_value;
  // memmove: a copy inside one region (chunk to chunk) may overlap.
  if (length != 0) std::memmove(t.dst_->tail(), t.src_->data(), length);
  t.dst_->append(length);
  return status::success;
}

}  // namespace zc::accel
