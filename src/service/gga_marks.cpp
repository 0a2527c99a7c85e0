// Missed-write marks of gga_worker::io_path (format v2, FORMATS.md §4.3): with one target lost,
// a write goes on to the two others, and the lost target then lacks it. Before such a write is
// begun (or, for one that was on its way when the target went, acknowledged), the labels of the
// two live targets are rewritten to name the lost one, in the label transaction; the writes wait
// (parked) meanwhile. A service started later on these targets then rebuilds the one named,
// instead of taking it back as if it held every write (md's event counts play this part).
#include "service/internal/gga_io_path.hpp"

#include <cstring>

#include "core/log.hpp"
#include "storage/io_message.hpp"

namespace zc::service {

using storage::io_message_type;

bool gga_worker::io_path::park_for_mark(transaction& t, parked_at where) noexcept {
  if (!needs_mark()) return false;
  t.parked = where;
  if (!parked_.push(index(t))) {
    // One place per host transaction: never full.
    t.parked = parked_at::none;
    fail(t, "write not parked for its mark", status::no_memory);
    return true;
  }
  (void)begin_mark();
  return true;
}

// The labels of the live targets, each naming the targets that lack writes it holds: those its
// label named at start (being rebuilt) and the lost one. False when the label transaction is
// busy (a rebuild step or a label IO: poll() tries again once it is idle) or retired.
bool gga_worker::io_path::begin_mark() noexcept {
  transaction& t = label_transaction();
  if (mark_pending_ || label_pending_ || t.retired || t.op != operation::none) return false;
  mark_missed_ = static_cast<uint8_t>(missed_ | lost_);
  ZC_LOG_WARN("worker {}: naming lost storage target(s) {:#x} on the labels of the others", cpu_,
              mark_missed_ & ~missed_);
  t.op = operation::label;
  t.result = status::success;
  t.sending = 0;
  t.awaiting = 0;
  mark_pending_ = true;
  ++in_flight_;
  begin_step(t);
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    if (is_lost(k)) continue;
    accel::gga_label label = volume_;
    label.role = accel::gga_role(k);
    label.missed = static_cast<uint8_t>(mark_missed_ & ~(1u << k));
    accel::encode_gga_label(label, std::span<uint8_t, accel::gga_label_size>(
                                       t.chunk + layout_.slot_at(k), accel::gga_label_size));
    issue(t, k, io_message_type::write, accel::gga_label_size, layout_.slot_at(k),
          config_.geometry.label_at);
  }
  t.issuing = false;
  settle(t);
  return true;
}

// Every live target asked has answered (or is gone): a target that could not keep the mark is
// lost too (a write it refused is one it would miss); the parked writes go on.
void gga_worker::io_path::mark_settled(transaction& t) noexcept {
  mark_pending_ = false;
  t.op = operation::none;
  if (in_flight_ > 0) --in_flight_;
  const uint8_t unmarked = static_cast<uint8_t>(t.asked & ~t.answered);
  for (uint32_t k = 0; k < gga_target_count; ++k)
    if ((unmarked & (1u << k)) != 0) suspect(k);
  if (unmarked == 0) {
    // The lost target is named now; a target rebuilt since the mark began is not named again.
    missed_ = static_cast<uint8_t>(missed_ | (mark_missed_ & lost_));
    ZC_LOG_WARN("worker {}: the live targets' labels name target(s) {:#x}: rebuilt when back", cpu_,
                missed_);
  }
  // A target suspected here is marked lost by the next poll(), which serves the parked writes.
  if (suspects_ == 0) (void)serve_parked();
}

// The parked writes: a mark begun when one is needed and the label transaction is free; the
// writes resumed once none is needed (a second lost target fails them as write_allowed says).
size_t gga_worker::io_path::serve_parked() noexcept {
  if (parked_.empty() || mark_pending_) return 0;
  const bool impossible = needs_mark() && label_transaction().retired;
  if (needs_mark() && !impossible) return begin_mark() ? 1 : 0;
  if (impossible && !mark_refused_logged_) {
    mark_refused_logged_ = true;
    ZC_LOG_ERROR(
        "worker {}: the lost target cannot be named on the others' labels (their label "
        "transaction timed out): writes fail",
        cpu_);
  }
  size_t done = 0;
  while (!parked_.empty()) {
    transaction& t = txns_[parked_.front()];
    parked_.pop();
    const parked_at where = t.parked;
    t.parked = parked_at::none;
    ++done;
    if (impossible) {
      fail(t, "write refused: its lost target is not named on the others' labels",
           status::not_connected);
    } else if (where == parked_at::before_write) {
      next_block(t);
    } else if (volume_.volume != 0 && (lost_ & ~missed_) != 0) {
      // A second target went before the first was named: no pair is left to vouch for it.
      fail(t, "write not acknowledged: a target it missed is not named on the others' labels",
           status::io_failed);
    } else {
      finish(t, t.result);
    }
  }
  return done;
}

}  // namespace zc::service
