#include "core/buffer.hpp"

namespace zc::core {

status buffer::set_data(uint8_t* data, size_t length) noexcept {
  if (data < head_ || static_cast<size_t>(data - head_) > capacity_ ||
      length > capacity_ - static_cast<size_t>(data - head_))
    return status::invalid_value;
  data_ = data;
  data_length_ = length;
  return status::success;
}

status buffer::reset(uint8_t* head, size_t capacity) noexcept {
  if (map_ == nullptr || !map_->contains(head, capacity)) return status::invalid_value;
  head_ = head;
  capacity_ = capacity;
  data_ = head;
  data_length_ = 0;
  return status::success;
}

void buffer::release() noexcept {
  if (!in_use_) return;
  in_use_ = false;
  inventory_->free_.push_back(this);
}

buffer_inventory::buffer_inventory(uint32_t count) : buffers_(count) {
  free_.reserve(count);
  for (auto it = buffers_.rbegin(); it != buffers_.rend(); ++it) {
    it->inventory_ = this;
    free_.push_back(&*it);
  }
}

status buffer_inventory::get_by_addr(memory_map& map, void* addr, size_t length,
                                     buffer*& out) noexcept {
  out = nullptr;
  if (!map.contains(addr, length)) return status::invalid_value;
  if (free_.empty()) return status::no_memory;
  buffer* b = free_.back();
  free_.pop_back();
  b->in_use_ = true;
  b->map_ = &map;
  b->head_ = static_cast<uint8_t*>(addr);
  b->capacity_ = length;
  b->data_ = b->head_;
  b->data_length_ = 0;
  out = b;
  return status::success;
}

status buffer_inventory::get_by_data(memory_map& map, void* data, size_t length,
                                     buffer*& out) noexcept {
  status s = get_by_addr(map, data, length, out);
  if (ok(s)) out->data_length_ = length;
  return s;
}

}  // namespace zc::core
