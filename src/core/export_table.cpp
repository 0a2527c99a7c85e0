#include "core/export_table.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "core/log.hpp"

namespace zc::core {
namespace internal {

// generation is odd while the slot holds a live export; ids carry it, so a withdrawn export's id
// never matches again. users counts claims in progress (acquire bumps it before checking).
struct export_slot {
  std::atomic<uint32_t> generation{0};
  std::atomic<uint32_t> users{0};
  uint8_t* data = nullptr;
  uint64_t size = 0;
  access permissions = access::local_read_only;
};

}  // namespace internal
namespace {

constexpr uint32_t slot_count = 4096;
std::array<internal::export_slot, slot_count> slots;
std::mutex control_mutex;  // add/remove only

uint32_t slot_of(uint64_t id) {
  return static_cast<uint32_t>(id & 0xFFFFFFFFu);
}
uint32_t generation_of(uint64_t id) {
  return static_cast<uint32_t>(id >> 32);
}

}  // namespace

export_table::claim& export_table::claim::operator=(claim&& other) noexcept {
  if (this != &other) {
    reset();
    slot_ = other.slot_;
    data_ = other.data_;
    other.slot_ = nullptr;
  }
  return *this;
}

void export_table::claim::reset() noexcept {
  if (slot_ != nullptr) slot_->users.fetch_sub(1);
  slot_ = nullptr;
  data_ = nullptr;
}

status export_table::acquire(uint64_t owner_token, uint64_t export_id, uint64_t offset,
                             uint64_t length, access needed, claim& out) noexcept {
  out.reset();
  if (owner_token != process_token()) return status::not_permitted;
  uint32_t index = slot_of(export_id);
  uint32_t generation = generation_of(export_id);
  if (index >= slot_count || (generation & 1u) == 0) return status::not_found;
  internal::export_slot& s = slots[index];
  s.users.fetch_add(1);  // seq_cst: pairs with remove()'s generation bump then users check
  if (s.generation.load() != generation) {
    s.users.fetch_sub(1);
    return status::not_found;
  }
  status result = status::success;
  if (!has(s.permissions, needed)) {
    result = status::not_permitted;
  } else if (offset > s.size || length > s.size - offset) {
    result = status::invalid_value;
  }
  if (!ok(result)) {
    s.users.fetch_sub(1);
    return result;
  }
  out.slot_ = &s;
  out.data_ = s.data + offset;
  return status::success;
}

uint64_t export_table::add(uint8_t* data, size_t size, access permissions) {
  std::lock_guard lock(control_mutex);
  for (uint32_t i = 0; i < slot_count; ++i) {
    internal::export_slot& s = slots[i];
    uint32_t generation = s.generation.load();
    if ((generation & 1u) != 0) continue;
    s.data = data;
    s.size = size;
    s.permissions = permissions;
    s.generation.store(generation + 1);
    return uint64_t(generation + 1) << 32 | i;
  }
  throw status_error(status::full, "RDMA export table is full");
}

void export_table::remove(uint64_t export_id) noexcept {
  std::lock_guard lock(control_mutex);
  uint32_t index = slot_of(export_id);
  if (index >= slot_count) return;
  internal::export_slot& s = slots[index];
  uint32_t generation = generation_of(export_id);
  if (!s.generation.compare_exchange_strong(generation, generation + 1)) return;
  // Claims are held only while bytes move, so this wait is short; it is bounded all the same, in
  // case the thread that would finish the transfer is this one.
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (s.users.load() != 0) {
    if (std::chrono::steady_clock::now() > give_up) {
      ZC_SDK_LOG_ERROR("export {:#x} withdrawn with {} transfers still in flight", export_id,
                       s.users.load());
      break;
    }
    std::this_thread::yield();
  }
  s.data = nullptr;
  s.size = 0;
}

}  // namespace zc::core
