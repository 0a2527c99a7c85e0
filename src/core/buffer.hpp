// zc::core::buffer and buffer_inventory, DOCA's doca_buf and doca_buf_inventory. A buffer is a
// window [head, head+capacity) of a memory map with a data section [data, data+length) inside
// it. The inventory holds a fixed number of buffer descriptors, taken at configure time, so the
// data path gets and returns them without allocating.
// Thread rules: an inventory and its buffers belong to one thread.
#pragma once

#include <cstdint>
#include <vector>

#include "core/memory_map.hpp"
#include "core/status.hpp"

namespace zc::core {

class buffer_inventory;

class buffer {
 public:
  uint8_t* head() const noexcept { return head_; }
  size_t capacity() const noexcept { return capacity_; }
  uint8_t* data() const noexcept { return data_; }
  size_t data_length() const noexcept { return data_length_; }
  memory_map& map() const noexcept { return *map_; }
  // Moves the data section; it must stay inside [head, head+capacity).
  status set_data(uint8_t* data, size_t length) noexcept;
  // Re-points the buffer at [head, head+capacity) of the same memory map, with an empty data
  // section at head, as get_by_addr would, but without going back to the inventory: a buffer held
  // for good (one per transaction slot) serves one IO after another this way. The window must lie
  // inside the map; otherwise invalid_value, and the buffer is unchanged.
  status reset(uint8_t* head, size_t capacity) noexcept;
  // Where appended bytes go (received, read or written ones, as DOCA appends them), how many fit,
  // and the append itself; `length` must fit (callers check tail_room() first).
  uint8_t* tail() const noexcept { return data_ + data_length_; }
  size_t tail_room() const noexcept {
    return capacity_ - static_cast<size_t>(data_ - head_) - data_length_;
  }
  void append(size_t length) noexcept { data_length_ += length; }
  // Offset of the data section from the start of its memory map.
  uint64_t map_offset() const noexcept { return static_cast<uint64_t>(data_ - map_->data()); }
  // Returns the descriptor to its inventory.
  void release() noexcept;

 private:
  friend class buffer_inventory;
  uint8_t* head_ = nullptr;
  size_t capacity_ = 0;
  uint8_t* data_ = nullptr;
  size_t data_length_ = 0;
  memory_map* map_ = nullptr;
  buffer_inventory* inventory_ = nullptr;
  bool in_use_ = false;
};

class buffer_inventory {
 public:
  explicit buffer_inventory(uint32_t count);
  // Buffers point back at their inventory: it stays where it was made.
  buffer_inventory(const buffer_inventory&) = delete;
  buffer_inventory& operator=(const buffer_inventory&) = delete;

  // A buffer over [addr, addr+length) with an empty data section at addr.
  status get_by_addr(memory_map& map, void* addr, size_t length, buffer*& out) noexcept;
  // A buffer whose data section is [data, data+length).
  status get_by_data(memory_map& map, void* data, size_t length, buffer*& out) noexcept;

  uint32_t capacity() const noexcept { return static_cast<uint32_t>(buffers_.size()); }
  uint32_t available() const noexcept { return static_cast<uint32_t>(free_.size()); }

 private:
  friend class buffer;
  std::vector<buffer> buffers_;
  std::vector<buffer*> free_;
};

}  // namespace zc::core
