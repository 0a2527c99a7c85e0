#include "core/export_table.hpp"

#include "core/random.hpp"

#include <array>
#include <atomic>
#include <mutex>
#include <utility>

namespace zc::core {
namespace internal {

// One export's slot. `state` packs the generation (high 32 bits) with the number of claims
// (low 32 bits), so that taking a claim, withdrawing and dropping the last claim are each one
// atomic step on one word:
//
//   free      generation even, users 0, in_use false   add() may take it
//   live      generation odd                           acquire() may take claims (users + 1)
//   draining  generation even, users > 0, in_use true  withdrawn; waits for its claims
//
// acquire() takes a claim with a compare-and-swap that only succeeds while the generation is the
// one its id names, so it never adds a user to a withdrawn slot, even for a moment. The state
// becomes (even, 0) exactly once per export: in remove() if no claim was live, otherwise in the
// fetch_sub of the last claim's release; whoever makes that step runs the release action, and
// only then clears in_use, which is what lets add() reuse the slot. A stale claim can therefore
// never be released against a later export of the same slot.
//
// The plain fields are written by add() (control mutex held, in_use false: nobody can hold a
// claim) before the release-ordered generation bump that publishes them; acquire() reads them
// only under a claim it took with an acquire-ordered CAS on that state. Every later change of
// `state` is a read-modify-write, so the bump's release sequence reaches every claim.
struct export_slot {
  std::atomic<uint64_t> state{0};
  std::atomic<bool> in_use{false};
  uint8_t* data = nullptr;
  uint64_t size = 0;
  uint64_t key = 0;
  access permissions = access::local_read_only;
  std::function<void()> release;
};

}  // namespace internal
namespace {

using internal::export_slot;

constexpr uint32_t slot_count = 4096;
constexpr uint64_t users_mask = 0xFFFFFFFFu;
constexpr uint64_t one_generation = uint64_t{1} << 32;

std::array<export_slot, slot_count> slots;
std::mutex control_mutex;  // add/remove only
uint32_t next_slot = 0;    // where add() starts looking (under control_mutex)

uint32_t slot_of(uint64_t id) {
  return static_cast<uint32_t>(id & 0xFFFFFFFFu);
}
uint64_t generation_of(uint64_t id) {
  return id >> 32;
}
bool live(uint64_t generation) {
  return (generation & 1u) != 0;
}

// The export in `s` is withdrawn and drained: empties the slot, frees it for add(), and returns
// the release action for the caller to run (outside any lock).
std::function<void()> finish(export_slot& s) noexcept {
  std::function<void()> release = std::move(s.release);
  s.release = nullptr;
  s.data = nullptr;
  s.size = 0;
  s.key = 0;
  s.permissions = access::local_read_only;
  s.in_use.store(false, std::memory_order_release);
  return release;
}

// Drops one claim; the one that drops the last claim of a withdrawn export finishes it.
void drop(export_slot& s) noexcept {
  // release: this claim's accesses to the memory happen before the release action frees it;
  // acquire: the releaser sees every other claim's accesses.
  const uint64_t before = s.state.fetch_sub(1, std::memory_order_acq_rel);
  if ((before & users_mask) == 1 && !live(generation_of(before))) {
    if (auto release = finish(s)) release();
  }
}

}  // namespace

export_table::claim& export_table::claim::operator=(claim&& other) noexcept {
  if (this != &other) {
    reset();
    slot_ = other.slot_;
    data_ = other.data_;
    other.slot_ = nullptr;
    other.data_ = nullptr;
  }
  return *this;
}

void export_table::claim::reset() noexcept {
  export_slot* s = slot_;
  slot_ = nullptr;
  data_ = nullptr;
  if (s != nullptr) drop(*s);
}

status export_table::acquire(uint64_t export_id, uint64_t key, uint64_t offset, uint64_t length,
                             access needed, claim& out) noexcept {
  out.reset();
  const uint32_t index = slot_of(export_id);
  const uint64_t generation = generation_of(export_id);
  if (index >= slot_count || !live(generation)) return status::not_found;
  export_slot& s = slots[index];
  uint64_t state = s.state.load(std::memory_order_acquire);
  do {
    // A claim only on the live export the id names; users cannot reach the generation bits
    // (every claim is an object of its own, far fewer than 2^32).
    if (generation_of(state) != generation) return status::not_found;
  } while (!s.state.compare_exchange_weak(state, state + 1, std::memory_order_acquire,
                                          std::memory_order_acquire));
  // Holding a claim: the fields are this export's and stay so.
  status result = status::success;
  if (key != s.key) {
    result = status::not_permitted;  // first, so a wrong key learns nothing about the region
  } else if (!has(s.permissions, needed)) {
    result = status::not_permitted;
  } else if (offset > s.size || length > s.size - offset) {
    result = status::invalid_value;
  }
  if (!ok(result)) {
    drop(s);
    return result;
  }
  out.slot_ = &s;
  out.data_ = s.data + offset;
  return status::success;
}

export_table::entry export_table::add(uint8_t* data, size_t size, access permissions,
                                      std::function<void()> release) {
  const uint64_t key = random_nonzero_u64();
  std::lock_guard lock(control_mutex);
  for (uint32_t n = 0; n < slot_count; ++n) {
    const uint32_t index = (next_slot + n) % slot_count;
    export_slot& s = slots[index];
    // acquire: the finish() that freed the slot is done with its fields.
    if (s.in_use.load(std::memory_order_acquire)) continue;
    s.data = data;
    s.size = size;
    s.key = key;
    s.permissions = permissions;
    s.release = std::move(release);
    s.in_use.store(true, std::memory_order_relaxed);
    // Free means (even generation, no users): the bump makes it live and publishes the fields.
    const uint64_t before = s.state.fetch_add(one_generation, std::memory_order_release);
    next_slot = (index + 1) % slot_count;
    const uint64_t generation = (generation_of(before) + 1) & 0xFFFFFFFFu;
    return {generation << 32 | index, key};
  }
  throw status_error(status::full, "RDMA export table is full");
}

void export_table::remove(uint64_t export_id) noexcept {
  const uint32_t index = slot_of(export_id);
  const uint64_t generation = generation_of(export_id);
  if (index >= slot_count || !live(generation)) return;
  export_slot& s = slots[index];
  std::function<void()> release;
  {
    std::lock_guard lock(control_mutex);
    uint64_t state = s.state.load(std::memory_order_relaxed);
    do {
      if (generation_of(state) != generation) return;  // unknown, stale or already withdrawn
    } while (!s.state.compare_exchange_weak(state, state + one_generation,
                                            std::memory_order_acq_rel, std::memory_order_relaxed));
    // From here on no acquire succeeds. With claims live, the last one's release finishes.
    if ((state & users_mask) != 0) return;
    release = finish(s);
  }
  if (release) release();
}

}  // namespace zc::core
