// zcstore's sparse IO types (DESIGN §2, FORMATS.md §2.1) over the gga stripes, format v2 only:
// a discard or write zeroes makes every slot of its blocks blank (all zero) on the three targets,
// so that each block reads as zeros on every path (a blank pair reads as zeros when the third
// slot is blank too or its target is lost, FORMATS §4.3); an allocation map is the union of the
// targets' maps of the blocks' entries. Format v1 has no blank slot (zeros are no LZ4 image): the
// three types are answered INVALID_VALUE there, and the front end falls back.
//
// Zeroing. The slots of host blocks [a, b) are the bytes [a x S, b x S) of every target, whose
// blocks are H bytes. The whole target blocks inside are zeroed by one write zeroes (type 5, also
// for a host discard: a target's discard may leave the old bytes, and a slot that keeps its entry
// beside blank ones would make its block unreadable); the parts of target blocks at both ends
// (S is not a multiple of H) are written with zeros from the chunk, never touching the slots of
// the blocks around. Only with all three targets up: a blank slot carries no generation, so two
// slots zeroed beside a lost target's would meet that target's old slot again if it came back in
// a later session, and the block would fail its reads. Degraded (and while a background rebuild
// may rewrite a slot between the steps) the zeroing types are answered INVALID_VALUE: the front
// end then writes zeros as data, which a generation protects.
//
// Allocation map. Host block j reads as zeros exactly when the entry of its slot on every live
// target is blank; an entry lies in target blocks that the target reports unallocated only if it
// reads as zeros there. So bit j is the OR, over the live targets, of the target map's bits of
// the blocks that hold j's entry on that target (bytes j x S + entry_at(role), 16 of them). One
// step asks every live target for the map of a window of target blocks into its slot of the
// chunk (S bytes at most, 4096 at most), folds in every block whose entries lie in the window,
// and goes on from the first block that does not. A block whose entry shares a target block with
// a neighbour's written slot is reported allocated (the map may say more than was written, never
// less, as a file system's).
#include <algorithm>
#include <bit>
#include <cstring>

#include "core/log.hpp"
#include "service/internal/gga_io_path.hpp"
#include "storage/io_message.hpp"

namespace zc::service {

using storage::io_message_type;
using storage::max_allocation_map_size;

// The sparse types in image format v1: answered INVALID_VALUE, which is not an error (the front
// end falls back).
bool gga_worker::io_path::refused_in_v1(transaction& t, const char* what) noexcept {
  if (verified()) return false;
  ZC_LOG_DEBUG("worker {}: {} are not served in image format v1", cpu_, what);
  finish(t, status::invalid_value);
  return true;
}

// ---- discard and write zeroes

void gga_worker::io_path::begin_zeroing(transaction& t, uint32_t io_size,
                                        uint64_t storage_offset) noexcept {
  // v1: zeros are no block image; the front end writes zeros as data.
  if (refused_in_v1(t, "discard and write zeroes")) return;
  const uint64_t b = block_size();
  const uint64_t capacity = config_.geometry.blocks() * b;
  if (io_size == 0 || io_size % b != 0 || storage_offset % b != 0 || storage_offset > capacity ||
      io_size > capacity - storage_offset) {
    ZC_LOG_DEBUG("worker {}: zeroing refused: {} bytes at storage offset {}", cpu_, io_size,
                 storage_offset);
    fail(t, "IO refused", status::invalid_value);
    return;
  }
  if (lost_ != 0 || zeroing_refused_) {
    ZC_LOG_DEBUG("worker {}: zeroing not served {}: the front end writes zeros as data", cpu_,
                 lost_ != 0 ? "with a storage target lost" : "while a rebuild runs");
    finish(t, status::invalid_value);
    return;
  }
  const uint64_t s = layout_.slots().slot();
  t.op = operation::zero;
  t.span_at = storage_offset / b * s;
  t.span_end = (storage_offset + io_size) / b * s;
  t.span_step = 0;
  if (hold_stripe(t, transaction::holds::zeroing)) zero_step(t);
}

// The next non-empty piece of the span to every target: the whole target blocks inside (write
// zeroes), then the head and the tail (zeros written from the chunk). All done: success.
void gga_worker::io_path::zero_step(transaction& t) noexcept {
  const uint64_t h = half();
  const uint64_t inner_at = (t.span_at + h - 1) / h * h;
  const uint64_t inner_end = t.span_end / h * h;
  const bool inner = inner_at < inner_end;
  while (t.span_step < 3) {
    const uint8_t step = t.span_step++;
    uint64_t at = 0, end = 0;
    if (step == 0) {
      if (!inner) continue;
      at = inner_at;
      end = inner_end;
    } else if (step == 1) {
      // No whole target block inside: the span is under two target blocks, less than the chunk.
      at = t.span_at;
      end = inner ? inner_at : t.span_end;
    } else {
      if (!inner) continue;
      at = inner_end;
      end = t.span_end;
    }
    if (at == end) continue;
    // Under 2^32: S < B, so the span is shorter than the host's io_size.
    const auto length = static_cast<uint32_t>(end - at);
    begin_step(t);
    if (step != 0) std::memset(t.chunk, 0, length);
    for (uint32_t k = 0; k < gga_target_count; ++k)
      if (!is_lost(k))
        issue(t, k, step == 0 ? io_message_type::write_zeroes : io_message_type::write, length, 0,
              at);
    t.issuing = false;
    settle(t);
    return;
  }
  finish(t, status::success);
}

// A step is in: on with the next when all three targets did it. When none did the first, because
// the targets do not zero ranges (INVALID_VALUE, a reference target), nothing was changed and the
// host is told so (its front end falls back); any other shortfall fails the IO (the blocks may
// then read as before, as zeros, or fail their reads: never as a mix of two writes).
void gga_worker::io_path::zero_settled(transaction& t) noexcept {
  if (ok(t.result) && t.answered == 0b111) {
    zero_step(t);
    return;
  }
  if (t.span_step == 1 && t.answered == 0 && t.result == status::invalid_value) {
    ZC_LOG_DEBUG("worker {}: the storage targets do not zero ranges", cpu_);
    finish(t, status::invalid_value);
    return;
  }
  fail(t, "zeroing did not reach all three storage targets",
       ok(t.result) ? status::io_failed : t.result);
}

// ---- allocation map

void gga_worker::io_path::begin_map(transaction& t, uint32_t io_size, uint64_t requester_offset,
                                    uint64_t storage_offset) noexcept {
  // v1: a block never written does not read as zeros; the front end answers "all allocated".
  if (refused_in_v1(t, "allocation maps")) return;
  const uint64_t b = block_size();
  const uint64_t blocks = config_.geometry.blocks();
  const uint64_t region = config_.host->size();
  if (io_size == 0 || io_size > max_allocation_map_size || storage_offset % b != 0 ||
      storage_offset / b >= blocks || requester_offset > region ||
      io_size > region - requester_offset) {
    ZC_LOG_DEBUG("worker {}: allocation map refused: {} bytes at host offset {}, storage offset {}",
                 cpu_, io_size, requester_offset, storage_offset);
    fail(t, "IO refused", status::invalid_value);
    return;
  }
  if (std::popcount(lost_) >= 2) {
    fail(t, "allocation map lost two storage targets", status::not_connected);
    return;
  }
  t.op = operation::map;
  t.map_first = storage_offset / b;
  t.map_next = t.map_first;
  t.map_end = std::min<uint64_t>(t.map_first + uint64_t(io_size) * 8, blocks);
  t.map_at = requester_offset;
  // Bits past the end stay 0; the others are ORed in step by step.
  std::memset(config_.host->data() + requester_offset, 0, io_size);
  map_step(t);
}

// Every live target's map of the window of target blocks from the one that holds the first
// entry of the next block, each into its own slot of the chunk.
void gga_worker::io_path::map_step(transaction& t) noexcept {
  if (t.map_next == t.map_end) {
    finish(t, status::success);
    return;
  }
  const uint64_t s = layout_.slots().slot();
  t.map_window = t.map_next * s / half();
  t.map_bytes = std::min<uint32_t>(layout_.slots().slot(), max_allocation_map_size);
  begin_step(t);
  for (uint32_t k = 0; k < gga_target_count; ++k)
    if (!is_lost(k))
      issue(t, k, io_message_type::allocation_map, t.map_bytes, layout_.slot_at(k),
            t.map_window * half());
  t.issuing = false;
  settle(t);
}

// Folds the window's maps into the host's bitmap, block after block, up to the first block with
// an entry past the window. A target that failed its map fails the IO (INVALID_VALUE from a
// reference target reaches the host as it is: the front end answers "all allocated"); a target
// lost on the way is left out, as are those lost before.
void gga_worker::io_path::map_settled(transaction& t) noexcept {
  const uint8_t live = static_cast<uint8_t>(0b111 & ~lost_);
  if (!ok(t.result) || (t.answered & live) != live || std::popcount(t.answered) < 2) {
    fail(t, "allocation map not answered by the storage targets",
         ok(t.result) ? status::not_connected : t.result);
    return;
  }
  const uint64_t h = half();
  const uint64_t s = layout_.slots().slot();
  const uint64_t window_end = t.map_window + uint64_t(t.map_bytes) * 8;
  uint8_t* bitmap = config_.host->data() + t.map_at;
  for (; t.map_next < t.map_end; ++t.map_next) {
    const uint64_t j = t.map_next;
    bool allocated = false;
    bool past = false;
    for (uint32_t k = 0; k < gga_target_count && !past; ++k) {
      if ((t.answered & (1u << k)) == 0) continue;
      const uint64_t entry = j * s + layout_.slots().entry_at(accel::gga_role(k));
      const uint64_t last = (entry + accel::gga_entry_size - 1) / h;
      if (last >= window_end) {
        past = true;
        break;
      }
      const uint8_t* map = t.chunk + layout_.slot_at(k);
      for (uint64_t tb = entry / h; tb <= last; ++tb) {
        const uint64_t i = tb - t.map_window;
        if ((map[i / 8] >> (i % 8) & 1) != 0) allocated = true;
      }
    }
    if (past) break;
    const uint64_t i = j - t.map_first;
    if (allocated) bitmap[i / 8] = static_cast<uint8_t>(bitmap[i / 8] | 1u << (i % 8));
  }
  map_step(t);
}

}  // namespace zc::service
