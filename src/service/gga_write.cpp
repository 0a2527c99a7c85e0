// A block write of gga_worker::io_path: the block DMA'd from the host's pages into the chunk,
// compressed (in v2 stored raw when its image does not fit), the parity half and the entries
// encoded, and the three slots written (two when a target is lost and the format allows it).
#include "service/internal/gga_io_path.hpp"

#include <bit>
#include <span>

#include "storage/io_message.hpp"

namespace zc::service {

using storage::io_message_type;

void gga_worker::io_path::dma_from_host(transaction& t) noexcept {
  (void)t.host->set_data(host_block(t), block_size());
  (void)t.plain->set_data(t.plain->head(), 0);
  submit_task(t, *dma_, dma_->allocate_memcpy(*t.host, *t.plain), "no DMA task",
              "DMA not submitted");
}

// In place: the engine compresses through its own scratch before it writes the image.
void gga_worker::io_path::compress(transaction& t) noexcept {
  (void)t.image->set_data(t.image->head(), 0);
  submit_task(t, *lz4_, lz4_->allocate_compress(*t.plain, *t.image), "no compress task",
              "compress not submitted");
}

// The parity half, and in v2 the three entries of this write (a repair brings its own entry).
void gga_worker::io_path::encode(transaction& t) noexcept {
  if (verified() && t.op == operation::write) {
    const accel::gga_entry e{gga_next_generation(), t.crc, t.stored_as};
    for (uint32_t k = 0; k < gga_target_count; ++k) {
      accel::gga_entry mine = e;
      mine.role = accel::gga_role(k);
      accel::encode_gga_entry(mine, std::span<uint8_t, accel::gga_entry_size>(
                                        t.chunk + layout_.entry_at(k), accel::gga_entry_size));
    }
  }
  (void)t.d1->set_data(t.d1->head(), half());
  (void)t.d2->set_data(t.d2->head(), half());
  (void)t.parity->set_data(t.parity->head(), 0);
  submit_task(t, *ec_, ec_->allocate_create(config_.matrix, *t.d1, *t.d2, *t.parity),
              "no EC create task", "EC create not submitted");
}

// With one target lost, a v2 write goes on to the two others: their slots carry the new
// generation, the lost target's slot an older one, so no read pairs it with them (it is rewritten
// by the first read that finds it, or the rebuild). v1 has no generation to tell them apart: a
// stripe is written whole or not at all there. Two targets lost: no write.
bool gga_worker::io_path::write_allowed(transaction& t) noexcept {
  if (lost_ == 0) return true;
  if (!verified()) {
    fail(t, "write refused: a storage target is lost", status::not_connected);
    return false;
  }
  if (std::popcount(lost_) >= 2) {
    fail(t, "write refused: two storage targets are lost", status::not_connected);
    return false;
  }
  return true;
}

void gga_worker::io_path::write_halves(transaction& t) noexcept {
  if (!write_allowed(t)) return;
  // A target lost while the block was being made: sent once the others' labels name it
  // (gga_marks.cpp; begun again from the host's bytes, under a new generation).
  if (park_for_mark(t, parked_at::before_write)) return;
  // And while no repair of the block is in flight (gga_stripes.hpp).
  if (!hold_stripe(t, transaction::holds::write)) return;
  begin_step(t);
  for (uint32_t k = 0; k < gga_target_count; ++k)
    if (!is_lost(k))
      issue(t, k, io_message_type::write, layout_.slots().slot(), layout_.slot_at(k),
            slot_offset(t));
  t.issuing = false;
  settle(t);
}

}  // namespace zc::service
