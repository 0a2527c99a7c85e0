// A transaction of gga_worker::io_path from the host's request to its reply: the request checked
// and planned, its blocks one after the other (each read in gga_read.cpp, each write in
// gga_write.cpp), a flush fanned out, a discard, write zeroes or allocation map (gga_sparse.cpp);
// each step's requests to the storage targets, their responses, and settle(), which moves the
// transaction on once a step is complete.
#include "service/internal/gga_io_path.hpp"

#include <bit>
#include <cstring>
#include <string>

#include "core/log.hpp"
#include "storage/io_message.hpp"

namespace zc::service {

using storage::io_message_size;
using storage::io_message_type;
using storage::io_message_view;

namespace {
// A flush's deadline, in storage timeouts (a host gives up on an IO after two).
constexpr int flush_deadline_factor = 4;
// The shortest host IO message that can be answered: type, padding and user_data.
constexpr uint32_t answerable_length = 16;
}  // namespace

// ---- the host's side: request in, one reply out, the receive posted again

void gga_worker::io_path::post_host_receive(transaction& t) noexcept {
  t.op = operation::none;
  (void)t.host_message->set_data(t.host_message->head(), 0);
  if (!serving_) return;
  if (status r = consumer_->submit(*t.receive); !ok(r)) note_error("cannot post comch receive", r);
}

void gga_worker::io_path::on_host_request(transaction& t) noexcept {
  if (!serving_) return;
  ++in_flight_;
  t.result = status::success;
  t.block = 0;
  t.sending = 0;
  t.awaiting = 0;
  t.forced = -1;
  if (const uint32_t length = t.receive->received_length(); length != io_message_size) {
    if (length < answerable_length) {
      // Too short to carry the host's user_data: nothing to answer; the buffer is reposted.
      note_error("IO message too short to answer dropped", status::invalid_value);
      --in_flight_;
      post_host_receive(t);
      return;
    }
    // Answered with the host's user_data; what it did not send reads as zeros.
    if (length < io_message_size)
      std::memset(t.host_message->head() + length, 0, io_message_size - length);
    fail(t, "IO message of the wrong length refused", status::invalid_value);
    return;
  }
  io_message_view msg(t.host_message->head());
  switch (msg.type()) {
    case io_message_type::read:
    case io_message_type::write: {
      std::string why;
      auto plan = plan_host_io(config_.geometry, config_.host->size(), msg.io_size(),
                               msg.requester_offset(), msg.storage_offset(), &why);
      if (!plan) {
        ZC_LOG_DEBUG("worker {}: IO refused: {}", cpu_, why);
        fail(t, "IO refused", status::invalid_value);
        return;
      }
      t.plan = *plan;
      t.op = msg.type() == io_message_type::read ? operation::read : operation::write;
      next_block(t);
      return;
    }
    case io_message_type::flush:
      // Every completed write of every target made durable (DESIGN §2), io_size 0.
      // Degraded, the two targets left hold every completed write (writes are refused then).
      t.op = operation::flush;
      begin_step(t);
      // A flush waits for the targets' storage (msync of a large backing file): it gets its own,
      // longer deadline, so a slow sync is not mistaken for a lost target.
      t.deadline = engine_.pass_time() + flush_deadline_factor * config_.storage_timeout;
      for (uint32_t k = 0; k < gga_target_count; ++k)
        if (!is_lost(k)) issue(t, k, io_message_type::flush, 0, 0, 0);
      t.issuing = false;
      settle(t);
      return;
    case io_message_type::discard:
    case io_message_type::write_zeroes:
      // zcstore's sparse types (DESIGN §2, FORMATS §2.1): gga_sparse.cpp.
      begin_zeroing(t, msg.io_size(), msg.storage_offset());
      return;
    case io_message_type::allocation_map:
      begin_map(t, msg.io_size(), msg.requester_offset(), msg.storage_offset());
      return;
    default:
      fail(t, "IO of an unknown type refused", status::invalid_value);
      return;
  }
}

bool gga_worker::io_path::hold_stripe(transaction& t, transaction::holds kind) noexcept {
  if (config_.stripes == nullptr || t.stripe != transaction::holds::nothing) return true;
  bool taken = false;
  if (kind == transaction::holds::zeroing) {
    const auto [first, count] = zeroed_blocks(t);
    taken = config_.stripes->begin_write_range(first, count);
  } else {
    taken = config_.stripes->begin_write(stripe_of(t));
  }
  if (!taken) {
    if (!stripe_waits_.push(index(t))) fail(t, "IO not queued for its blocks", status::no_memory);
    return false;
  }
  t.stripe = kind;
  return true;
}

void gga_worker::io_path::release_stripe(transaction& t) noexcept {
  switch (t.stripe) {
    case transaction::holds::write:
      config_.stripes->end_write(stripe_of(t));
      break;
    case transaction::holds::repair:
      config_.stripes->end_repair(stripe_of(t));
      break;
    case transaction::holds::zeroing: {
      const auto [first, count] = zeroed_blocks(t);
      config_.stripes->end_write_range(first, count);
      break;
    }
    case transaction::holds::nothing:
      break;
  }
  t.stripe = transaction::holds::nothing;
}

void gga_worker::io_path::fail(transaction& t, const char* what, status why) noexcept {
  note_error(what, why);
  finish(t, why);
}

void gga_worker::io_path::finish(transaction& t, status result) noexcept {
  release_stripe(t);
  if (is_rebuild(t)) {
    rebuild_block_done(t, result);
    return;
  }
  // A write that a lost target missed is acknowledged once the others' labels name it.
  if (t.op == operation::write && ok(result) && park_for_mark(t, parked_at::before_reply)) return;
  io_message_view msg(t.host_message->head());
  msg.set_type(io_message_type::result);
  msg.set_result(result);
  send_reply(index(t));
}

void gga_worker::io_path::send_reply(uint32_t i) noexcept {
  status r = backlog_.empty() ? producer_->submit(*txns_[i].reply) : status::again;
  if (r == status::again) {
    if (backlog_.push(i)) return;
    r = status::no_memory;
  }
  if (!ok(r)) {
    note_error("reply not delivered to the host", r);
    on_replied(txns_[i], false);
  }
}

void gga_worker::io_path::on_replied(transaction& t, bool delivered) noexcept {
  if (delivered) ++operations_;
  if (in_flight_ > 0) --in_flight_;
  if (t.retired) {
    // Its chunk may still be read or written by a target that answers late: the slot is not
    // used again this session (the host keeps at least T of the 2T slots for a while; a target
    // that keeps timing out ends in a lost connection or an unusable worker, never in bytes of
    // one IO written into another).
    if (retired_++ == 0)
      ZC_LOG_WARN("worker {}: a transaction slot is retired after a storage timeout", cpu_);
    t.op = operation::none;
    return;
  }
  post_host_receive(t);
}

// ---- one block after the other

void gga_worker::io_path::next_block(transaction& t) noexcept {
  if (t.block == t.plan.blocks) {
    finish(t, t.result);
    return;
  }
  if (t.op == operation::read) {
    t.forced = trigger_.tick() ? static_cast<int>(gga_lost_half(++forced_)) : -1;
    t.have = t.got = t.refused = t.tried = t.repair = 0;
    observe_stripe(t);
    begin_step(t);
    // Two halves of the three: both data halves, or for a recovery read (§6.3) the other data
    // half and the parity. A lost target's place is taken by the one not asked.
    uint8_t want = t.forced < 0 ? uint8_t(0b011) : uint8_t(0b111 & ~(1u << t.forced));
    for (uint32_t k = 0; k < gga_target_count; ++k) {
      if ((want & (1u << k)) == 0 || !is_lost(k)) continue;
      want = static_cast<uint8_t>((want & ~(1u << k)) | (0b111 & ~want));
    }
    for (uint32_t k = 0; k < gga_target_count; ++k)
      if ((want & (1u << k)) != 0 && !is_lost(k)) ask_half(t, k);
    t.issuing = false;
    settle(t);
    return;
  }
  if (!write_allowed(t)) return;
  // Begun once the labels of the two others name a lost target (gga_marks.cpp): before the
  // block's generation is taken, so a wait for the mark does not age it.
  if (park_for_mark(t, parked_at::before_write)) return;
  dma_from_host(t);
}

// ---- a step: its requests to the storage targets out, their responses in

void gga_worker::io_path::begin_step(transaction& t) noexcept {
  ++t.step;
  t.asked = 0;
  t.answered = 0;
  t.issuing = true;
  t.deadline = engine_.pass_time() + config_.storage_timeout;
}

void gga_worker::io_path::issue(transaction& t, uint32_t target, io_message_type type,
                                uint32_t io_size, uint64_t chunk_part,
                                uint64_t storage_offset) noexcept {
  io_message_view msg(t.request[target]->head());
  msg.set_type(type);
  // Our own transaction index (and step): the host's user_data stays in its buffer for the reply
  // (§3.2).
  msg.set_user_data(uint64_t(t.step) << 32 | index(t));
  msg.set_result(status::success);
  msg.set_io_size(io_size);
  msg.set_requester_offset(io_size == 0 ? 0 : t.chunk_offset + chunk_part);
  msg.set_storage_offset(storage_offset);
  (void)t.request[target]->set_data(t.request[target]->head(), io_message_size);
  ++t.sending;
  t.awaiting = static_cast<uint8_t>(t.awaiting | (1u << target));
  t.asked = static_cast<uint8_t>(t.asked | (1u << target));
  const uint32_t key = index(t) * gga_target_count + target;
  if (!resends_.empty()) {
    if (!resends_.push(key)) storage_send_failed(index(t), target, status::no_memory);
    return;
  }
  submit_storage(index(t), target);
}

void gga_worker::io_path::submit_storage(uint32_t i, uint32_t target) noexcept {
  const status r = control_[target]->submit(*txns_[i].send[target]);
  if (r == status::again) {
    if (!resends_.push(i * gga_target_count + target))
      storage_send_failed(i, target, status::no_memory);
    return;
  }
  if (!ok(r)) storage_send_failed(i, target, r);
}

// A request that never left gets no response either: both are settled now. A transport failure
// leaves the target suspected (the caller's doing) and the step short of its answer; a local one
// (no room to queue the send) fails the transaction.
void gga_worker::io_path::storage_send_failed(uint32_t i, uint32_t target, status why) noexcept {
  transaction& t = txns_[i];
  if (why == status::no_memory) {
    note_error("storage request not sent", why);
    if (t.result == status::success) t.result = why;
  } else {
    suspect(target);
  }
  const uint8_t bit = static_cast<uint8_t>(1u << target);
  if (t.sending > 0) --t.sending;
  t.awaiting = static_cast<uint8_t>(t.awaiting & ~bit);
  settle(t);
}

void gga_worker::io_path::on_storage_sent(transaction& t) noexcept {
  if (t.sending > 0) --t.sending;
  settle(t);
}

void gga_worker::io_path::on_storage_response(uint32_t target, uint32_t slot) noexcept {
  response_slot& r = responses_[target][slot];
  r.posted = false;
  if (r.receive->received_length() != io_message_size) {
    note_error("storage response of the wrong length refused", status::invalid_value);
    post_response_receive(target, r);
    return;
  }
  io_message_view msg(r.message->head());
  const uint64_t i = msg.user_data() & UINT32_MAX;
  const uint32_t step = static_cast<uint32_t>(msg.user_data() >> 32);
  const status result = msg.result();
  const bool is_result = msg.type() == io_message_type::result;
  post_response_receive(target, r);
  // The index comes from a peer: checked before it is used (§8.4), and only a transaction that
  // waits for this target's answer takes it.
  const uint8_t bit = static_cast<uint8_t>(1u << target);
  if (i >= transactions_ || (txns_[i].awaiting & bit) == 0 || txns_[i].step != step || !is_result) {
    note_error("storage response for no waiting transaction dropped", status::invalid_value);
    return;
  }
  transaction& t = txns_[i];
  t.awaiting = static_cast<uint8_t>(t.awaiting & ~bit);
  if (ok(result)) {
    t.answered = static_cast<uint8_t>(t.answered | bit);
    if (t.op == operation::read) {
      t.have = static_cast<uint8_t>(t.have | bit);
      t.got = static_cast<uint8_t>(t.got | bit);
    }
  } else if (t.op == operation::read) {
    // A slot the target could not read is missing, as a lost target's: the stripe's other pair
    // serves the block (a failed repair write only goes uncounted).
    t.refused = static_cast<uint8_t>(t.refused | bit);
  } else if (t.result == status::success) {
    // A target's failure becomes the host's result (the reference forced success, §8.3).
    t.result = result;
  }
  settle(t);
}

void gga_worker::io_path::post_response_receive(uint32_t target, response_slot& s) noexcept {
  (void)s.message->set_data(s.message->head(), 0);
  if (!storage_armed_ || s.posted) return;
  if (status r = control_[target]->submit(*s.receive); !ok(r))
    note_error("cannot post rdma receive", r);
  else
    s.posted = true;
}

// Every send and response of this step is in: on to the codec, or the next block.
void gga_worker::io_path::settle(transaction& t) noexcept {
  if (t.issuing || t.sending != 0 || t.awaiting != 0) return;
  if (t.op == operation::label && mark_pending_) {
    mark_settled(t);
    return;
  }
  if (t.op == operation::label) {
    // Not the host's: no reply. What answered is in the chunk.
    label_answered_ = t.answered;
    label_pending_ = false;
    t.op = operation::none;
    t.result = status::success;
    if (in_flight_ > 0) --in_flight_;
    return;
  }
  if (t.op == operation::read && t.repair != 0) {
    // The block was verified and is in the host's pages: a repair that could not be sent only
    // goes uncounted.
    t.result = status::success;
    finish_repair(t);
    return;
  }
  if (t.op == operation::zero) {
    zero_settled(t);
    return;
  }
  if (t.op == operation::map) {
    map_settled(t);
    return;
  }
  if (!ok(t.result)) {
    note_error("storage request failed", t.result);
    finish(t, t.result);
    return;
  }
  switch (t.op) {
    case operation::read:
      settle_read(t);
      return;
    case operation::write:
      release_stripe(t);
      // Every slot written (v1), or in v2 every live target's and at least two: the stripe is
      // whole or, one target lost, readable from the two others.
      if (const uint8_t need = verified() ? uint8_t(0b111 & ~lost_) : uint8_t(0b111);
          (t.answered & need) != need || std::popcount(t.answered) < 2) {
        fail(t, "write lost a storage target half-way", status::io_failed);
        return;
      }
      if (t.answered != 0b111) ++degraded_writes_;
      ++t.block;
      next_block(t);
      return;
    default:
      // A flush: durable on two targets is enough to rebuild every block.
      if (std::popcount(t.answered) < 2) {
        fail(t, "flush reached fewer than two storage targets", status::not_connected);
        return;
      }
      finish(t, t.result);
      return;
  }
}

}  // namespace zc::service
