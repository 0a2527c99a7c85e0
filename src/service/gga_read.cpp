// A block read of gga_worker::io_path: two slots of the stripe asked for, the first pair of slots
// that vouch for the block decoded (an EC recovery first when the pair leaves out a data half),
// the image decompressed or copied into the host's pages, in v2 checked against its crc32c, and
// a bad slot found on the way rewritten (repair) before the next block.
#include "service/internal/gga_io_path.hpp"

#include <array>
#include <cstring>
#include <span>

#include "core/crc32c.hpp"
#include "core/log.hpp"
#include "storage/io_message.hpp"

namespace zc::service {

using storage::io_message_type;

// The target's whole slot, into its place in the chunk: in v2 its entry comes with its half.
void gga_worker::io_path::ask_half(transaction& t, uint32_t target) noexcept {
  issue(t, target, io_message_type::read, layout_.slots().slot(), layout_.slot_at(target),
        slot_offset(t));
}

// Every answer of the block's step is in: decode the first pair of slots not tried yet that is
// here (the regular pair d1+d2 first, or for a recovery read, §6.3, the pair without the half it
// rebuilds), or ask for the slots an untried pair still needs, or give up. A pair is tried once:
// in v2 a pair whose entries disagree or whose block fails its crc leaves the next pair to try.
void gga_worker::io_path::settle_read(transaction& t) noexcept {
  const uint32_t first = t.forced < 0 ? uint32_t(gga_data_p) : uint32_t(t.forced);
  const std::array<uint32_t, 3> order{first, first == gga_data_p ? 1u : uint32_t(gga_data_p),
                                      first == 0 ? 1u : 0u};
  uint8_t reachable = 0;  // slots an untried pair could still use
  for (uint32_t left_out : order) {
    const uint8_t bit = static_cast<uint8_t>(1u << left_out);
    const uint8_t need = static_cast<uint8_t>(0b111 & ~bit);
    if ((t.tried & bit) != 0 || (need & (t.refused | lost_)) != 0) continue;
    if ((t.have & need) != need) {
      reachable = static_cast<uint8_t>(reachable | need);
      continue;
    }
    t.tried = static_cast<uint8_t>(t.tried | bit);
    if (try_pair(t, left_out)) return;
  }
  const uint8_t ask = static_cast<uint8_t>(reachable & ~t.have);
  if (ask != 0) {
    begin_step(t);
    for (uint32_t k = 0; k < gga_target_count; ++k)
      if ((ask & (1u << k)) != 0) ask_half(t, k);
    t.issuing = false;
    if (t.awaiting != 0 || t.sending != 0) return;
    // None could be sent: those targets are as good as refused.
    t.refused = static_cast<uint8_t>(t.refused | ask);
    settle_read(t);
    return;
  }
  if (t.tried == 0) {
    fail(t, "block read lost two storage targets", status::not_connected);
    return;
  }
  ++unrecoverable_;
  ZC_LOG_ERROR(
      "worker {}: block {} of storage offset {}: no pair of its slots gives a block "
      "that matches its checksum; the read fails",
      cpu_, t.block, t.plan.target_offset);
  fail(t, "block unrecoverable", status::io_failed);
}

// Decodes the pair of slots that leaves `left_out` out. False when its entries say that they are
// not of the same write (or are damaged): the caller tries another pair.
bool gga_worker::io_path::try_pair(transaction& t, uint32_t left_out) noexcept {
  t.pair = static_cast<uint8_t>(left_out);
  auto entry_of = [&](uint32_t k, accel::gga_entry& e) {
    return accel::decode_gga_entry(std::span<const uint8_t, accel::gga_entry_size>(
                                       t.chunk + layout_.entry_at(k), accel::gga_entry_size),
                                   accel::gga_role(k), e);
  };
  if (!verified()) {
    t.verdict = accel::gga_pair_verdict::lz4;
  } else {
    const uint32_t a = left_out == 0 ? 1 : 0, b = left_out == gga_data_p ? 1 : 2;
    accel::gga_entry ea, eb;
    if (!ok(entry_of(a, ea)) || !ok(entry_of(b, eb))) {
      note_fault("damaged block entry in a slot", status::invalid_value);
      return false;
    }
    t.verdict = accel::judge_gga_pair(ea, eb);
    if (t.verdict == accel::gga_pair_verdict::mismatch) return false;
    t.entry = ea;
  }
  if (t.verdict == accel::gga_pair_verdict::blank) {
    // Zeros only if the third slot is blank too, or its target is lost (nothing is left to say
    // otherwise); one its target could not read may hold the block.
    const uint8_t third = static_cast<uint8_t>(1u << left_out);
    if ((t.refused & third) != 0) return false;  // unreadable: it may hold the block
    if (!is_lost(left_out)) {
      if ((t.have & third) == 0) {
        t.tried = static_cast<uint8_t>(t.tried & ~third);  // tried again with the third slot in
        begin_step(t);
        ask_half(t, left_out);
        t.issuing = false;
        if (t.awaiting == 0 && t.sending == 0) t.refused = static_cast<uint8_t>(t.refused | third);
        settle(t);
        return true;
      }
      accel::gga_entry e;
      if (!ok(entry_of(left_out, e)) || e.stored_as != accel::gga_stored_as::none) return false;
    }
    std::memset(host_block(t), 0, block_size());  // never written: zeros
    block_done(t);
    return true;
  }
  if (left_out == gga_data_p) {
    decode(t);
  } else {
    // Rebuilt over the chunk's copy: that slot no longer holds what its target has.
    t.have = static_cast<uint8_t>(t.have & ~(1u << left_out));
    recover(t, left_out);
  }
  return true;
}

void gga_worker::io_path::recover(transaction& t, uint32_t lost_half) noexcept {
  if (t.forced != static_cast<int>(lost_half) || (t.tried & ~(1u << lost_half)) != 0) ++rebuilds_;
  const uint32_t h = half();
  (void)t.d1->set_data(t.d1->head(), lost_half == 0 ? 0 : h);
  (void)t.d2->set_data(t.d2->head(), lost_half == 1 ? 0 : h);
  (void)t.parity->set_data(t.parity->head(), h);
  // Survivors in stripe order; the rebuilt half lands in its own place in the chunk.
  submit_task(t, *ec_,
              lost_half == 0 ? ec_->allocate_recover(config_.matrix, 0, *t.d2, *t.parity, *t.d1)
                             : ec_->allocate_recover(config_.matrix, 1, *t.d1, *t.parity, *t.d2),
              "no EC recover task", "EC recover not submitted");
}

void gga_worker::io_path::decode(transaction& t) noexcept {
  if (t.verdict == accel::gga_pair_verdict::raw)
    copy_to_host(t);
  else
    decompress(t);
}

// The block is in the host's pages: in v2 it counts only if it matches the crc its entries
// carry; if not, the next pair is tried. A block served by a fallback pair has its bad slot
// rewritten before the next block.
void gga_worker::io_path::check_block(transaction& t) noexcept {
  if (!verified()) {
    block_done(t);
    return;
  }
  if (core::crc32c({host_block(t), block_size()}) != t.entry.crc) {
    note_fault("block does not match its checksum", status::io_failed);
    settle_read(t);
    return;
  }
  ++verified_;
  const uint32_t bad = t.pair;
  const uint8_t bit = static_cast<uint8_t>(1u << bad);
  // The slot left out is bad when an earlier pair with it failed or its target refused it; the
  // rebuild, which reads all three, also when its entry is not this write's (a blank
  // replacement's, a stale one).
  bool rewrite = (t.tried & ~bit) != 0 || (t.refused & bit) != 0;
  if (!rewrite && is_rebuild(t) && (t.have & bit) != 0) {
    accel::gga_entry e;
    rewrite =
        !ok(accel::decode_gga_entry(std::span<const uint8_t, accel::gga_entry_size>(
                                        t.chunk + layout_.entry_at(bad), accel::gga_entry_size),
                                    accel::gga_role(bad), e)) ||
        e.generation != t.entry.generation || e.crc != t.entry.crc ||
        e.stored_as != t.entry.stored_as;
  }
  if (rewrite && !is_lost(bad) && !newer_write_may_land(t, bad)) {
    // Only if no write of the block began or was landing since the read began: the repair would
    // undo its slot on that target (gga_stripes.hpp). The next read finds the slot again.
    if (config_.stripes == nullptr || config_.stripes->begin_repair(stripe_of(t), t.stripe_seen)) {
      if (config_.stripes != nullptr) t.stripe = transaction::holds::repair;
      repair(t, bad);
      return;
    }
    ZC_LOG_DEBUG("worker {}: slot of block {} not rewritten: a write of it came since", cpu_,
                 stripe_of(t));
    if (is_rebuild(t)) rebuild_again_ = true;
  }
  block_done(t);
}

// A slot whose entry is of a later write than the verified pair's may belong to a write still on
// its way (another worker's, or one whose other slots have not landed yet): rewriting it with the
// older block could undo that write once it is acknowledged. It is left alone unless that write
// began longer ago than any write step may last (a torn write's leftover, safe to roll back).
bool gga_worker::io_path::newer_write_may_land(const transaction& t,
                                               uint32_t target) const noexcept {
  if ((t.got & (1u << target)) == 0) return false;  // not read: its target refused it
  accel::gga_entry e;
  if (!ok(accel::decode_gga_entry(std::span<const uint8_t, accel::gga_entry_size>(
                                      t.chunk + layout_.entry_at(target), accel::gga_entry_size),
                                  accel::gga_role(target), e)) ||
      e.generation <= t.entry.generation)
    return false;
  const auto now = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count());
  const auto settled = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(4 * config_.storage_timeout).count());
  return now < e.generation || now - e.generation < settled;
}

// Rewrites `target`'s slot from the verified pair: the same entry with that target's role, and
// its half, which for a data half the recovery rebuilt in place, and for the parity is encoded
// again from both data halves.
void gga_worker::io_path::repair(transaction& t, uint32_t target) noexcept {
  t.repair = static_cast<uint8_t>(target + 1);
  accel::gga_entry e = t.entry;
  e.role = accel::gga_role(target);
  accel::encode_gga_entry(e, std::span<uint8_t, accel::gga_entry_size>(
                                 t.chunk + layout_.entry_at(target), accel::gga_entry_size));
  if (target == gga_data_p) {
    encode(t);
    return;
  }
  write_repair(t);
}

void gga_worker::io_path::write_repair(transaction& t) noexcept {
  const uint32_t target = t.repair - 1u;
  begin_step(t);
  issue(t, target, io_message_type::write, layout_.slots().slot(), layout_.slot_at(target),
        slot_offset(t));
  t.issuing = false;
  settle(t);
}

void gga_worker::io_path::finish_repair(transaction& t) noexcept {
  const uint32_t target = t.repair - 1u;
  t.repair = 0;
  const uint64_t at = slot_offset(t);
  if ((t.answered & (1u << target)) != 0) {
    ++repaired_;
    ZC_LOG_WARN("worker {}: storage target {}: slot at {} was bad and is rewritten", cpu_, target,
                at);
  } else {
    if (is_rebuild(t)) rebuild_failed_ = true;  // its labels keep naming the target
    ZC_LOG_WARN("worker {}: storage target {}: slot at {} is bad and could not be rewritten", cpu_,
                target, at);
  }
  block_done(t);
}

void gga_worker::io_path::block_done(transaction& t) noexcept {
  release_stripe(t);
  ++t.block;
  next_block(t);
}

// Straight into the host's pages (§6.2): the image is checked by the decompressor, every length
// read from storage included.
void gga_worker::io_path::decompress(transaction& t) noexcept {
  (void)t.image->set_data(t.image->head(), block_size());
  (void)t.host->set_data(host_block(t), 0);
  submit_task(t, *lz4_, lz4_->allocate_decompress(*t.image, *t.host), "no decompress task",
              "decompress not submitted");
}

// A block stored raw: its image is the block.
void gga_worker::io_path::copy_to_host(transaction& t) noexcept {
  (void)t.image->set_data(t.image->head(), block_size());
  (void)t.host->set_data(host_block(t), 0);
  submit_task(t, *dma_, dma_->allocate_memcpy(*t.image, *t.host), "no DMA task",
              "DMA not submitted");
}

}  // namespace zc::service
