// The shared-memory queue of one consumer: the receive buffers it has posted, which producers of
// the peer process claim and fill. It lives in a memfd the consumer creates and passes to the peer
// (shared_segment.hpp), so both processes see the same slots; the buffers themselves are in the
// consumer's PCI-exported memory map, which the peer imports.
//
// Each slot carries a sequence number that says what the slot holds for queue position p:
//   p + 1  posted: offset/capacity name a free receive buffer in the consumer's memory map
//   p + 2  filled: a producer copied `length` bytes into that buffer
// The consumer posts at its tail and completes in position order. Producers claim the position
// at `head` with a compare-and-swap (uncontended with one producer per consumer, the common
// case), copy straight into the posted buffer, then publish with a release store of the sequence.
// So a message is copied once, order is FIFO per producer->consumer pair, and a consumer that
// stops revokes every unclaimed buffer by moving `head` itself: after that no honest producer
// writes into its memory. A buffer claimed before that is handed back only once filled or once
// the peer is gone.
//
// The other process can write anything here. Each side relies only on what it wrote itself (its
// slot count, the buffers it posted, the memory size it imported) and checks every offset,
// length and position it reads against that; a lie fails the consumer or the send (FORMATS.md
// §6.4).
//
// The consumer also publishes `posted` (its tail) on a line of its own. Producers claim only
// positions below it, so a producer waiting for buffers spins on that line, not on the slot line
// the consumer is about to write: without it the two sides fight over the slot line at every
// re-post (measured: several failed claims per message in busy mode).
//
// Sleeping: a consumer about to sleep sets consumer_sleeping and re-checks its next slot; a
// producer that published checks the flag and rings the consumer's data doorbell (an eventfd).
// Producers starved of posted buffers set producers_starved and re-check `posted`; the consumer
// checks the flag once per poll round and before it sleeps, and rings the space doorbell. Both
// sides put a seq_cst fence between that store and that load (Dekker), so no wake-up is lost.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace zc::comch::internal {

inline constexpr uint32_t queue_magic = 0x5A435155;  // "ZCQU"
inline constexpr uint32_t queue_version = 1;
inline constexpr uint32_t max_queue_slots = 1u << 16;
// A queue's slot count as a peer may announce it: a power of two in [2, max_queue_slots].
constexpr bool valid_slot_count(uint32_t n) noexcept {
  return n >= 2 && n <= max_queue_slots && (n & (n - 1)) == 0;
}
inline constexpr size_t cache_line = 64;

struct alignas(cache_line) queue_header {
  // Written by the consumer before the queue is announced, never after (but `closed`).
  uint32_t magic;
  uint32_t version;
  uint32_t slot_count;
  uint32_t consumer_id;
  std::atomic<uint32_t> closed;  // the consumer stopped: producers claim nothing more
  // Producers only.
  alignas(cache_line) std::atomic<uint64_t> head;
  // Consumer only: positions below it have been posted.
  alignas(cache_line) std::atomic<uint64_t> posted;
  // Doorbell requests.
  alignas(cache_line) std::atomic<uint32_t> consumer_sleeping;
  std::atomic<uint32_t> producers_starved;
};

struct alignas(cache_line) queue_slot {
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> offset;    // of the receive buffer in the consumer's memory map
  std::atomic<uint64_t> capacity;  // bytes a producer may write there
  std::atomic<uint64_t> length;    // bytes the producer wrote
};

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the queue is shared between processes: its atomics must be lock-free");

constexpr size_t queue_bytes(uint32_t slots) {
  return sizeof(queue_header) + size_t(slots) * sizeof(queue_slot);
}

inline queue_slot* queue_slots(queue_header* h) {
  return reinterpret_cast<queue_slot*>(reinterpret_cast<uint8_t*>(h) + sizeof(queue_header));
}

}  // namespace zc::comch::internal
