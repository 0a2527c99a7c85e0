// rdma::context, owner side: the peer's sends land in our posted receives, and its reads, writes
// and atomics are served from our exports, each checked (state, permission, export key, range)
// before a byte moves.
#include <ucp/api/ucp.h>

#include <atomic>
#include <cstring>

#include "core/export_table.hpp"
#include "core/log.hpp"
#include "rdma/context.hpp"
#include "rdma/internal/ucs_status.hpp"
#include "rdma/internal/ucx_worker.hpp"

namespace zc::rdma {

using core::access;
using core::steady_clock;
using internal::from_ucs;
using internal::op;
using internal::wire_header;

status context::serving_state() const noexcept {
  // A request that arrives while we start or stop is refused, never applied with its answer lost.
  return state() == core::context_state::running ? status::success : status::bad_state;
}

// Completes, in arrival order, every matched receive whose data is in place (or that failed).
void context::deliver_ready() noexcept {
  while (!arrived_.empty() && arrived_.front()->delivered_) {
    task* t = arrived_.front();
    if (t->wire_id_ != 0 &&
        ok(t->outcome_)) {  // a send (writes with immediate are acked as writes)
      ack_seq_ = t->wire_id_;
      if (!ack_pending_) {
        ack_pending_ = true;
        worker_->want_flush(*this);
      }
    }
    finish(*t, t->outcome_);
  }
}

int context::on_send(const wire_header& h, void* data, size_t length, bool rendezvous) {
  // Sends are numbered 1, 2, 3... by the peer: a gap or a repeat means messages were lost or
  // forged, and matching by position would hand a message to the wrong receive.
  const uint64_t seq = last_received_seq_ + 1;
  if (h.seq != static_cast<uint32_t>(seq)) {
    ZC_SDK_LOG_ERROR("rdma: send {} arrived where {} was due; failing the connection", h.seq,
                     static_cast<uint32_t>(seq));
    note_failure(status::io_failed);
    return UCS_OK;
  }
  last_received_seq_ = seq;
  if (!ok(serving_state()) || posted_.empty()) {
    ZC_SDK_LOG_DEBUG("rdma: send {} refused: no receive posted", seq);
    nack_send(seq, status::empty);
    return UCS_OK;
  }
  auto& t = static_cast<receive_task&>(*posted_.front());
  posted_.remove(t);
  t.wire_id_ = seq;
  arrived_.push_back(t);
  if (length > t.dst_->tail_room()) {
    ZC_SDK_LOG_WARN("rdma: a {}-byte message does not fit the posted {}-byte buffer", length,
                    t.dst_->tail_room());
    // Completes in its turn, after the receives that arrived before it.
    t.outcome_ = status::too_big;
    t.delivered_ = true;
    nack_send(seq, status::too_big);
    deliver_ready();
    return UCS_OK;
  }
  t.has_immediate_ = (h.flags & internal::has_immediate) != 0;
  t.from_write_ = false;
  t.immediate_ = h.immediate;
  t.received_ = length;
  uint8_t* dst = t.dst_->tail();
  if (!rendezvous) {
    if (length != 0) std::memcpy(dst, data, length);
    t.dst_->append(length);
    t.delivered_ = true;
    deliver_ready();
    return UCS_OK;
  }
  t.deadline_ = new_deadline();
  return receive_rendezvous(t, data, dst, length);
}

// Owner side of a write: checks first, then the bytes land once, straight in the region.
int context::on_write(const wire_header& h, void* data, size_t length, bool rendezvous) {
  core::export_table::claim claim;
  status result = serving_state();
  if (ok(result) && !core::has(permissions_, access::rdma_write)) result = status::not_permitted;
  if (ok(result) && length != h.length) result = status::invalid_value;
  if (ok(result))
    result = core::export_table::acquire(h.export_id, h.export_key, h.offset, h.length,
                                         access::rdma_write, claim);
  receive_task* receive = nullptr;
  if (ok(result) && (h.flags & internal::has_immediate) != 0) {
    if (posted_.empty()) {
      result = status::empty;
    } else {
      receive = static_cast<receive_task*>(posted_.front());
      posted_.remove(*receive);
      receive->wire_id_ = 0;
      receive->has_immediate_ = true;
      receive->from_write_ = true;
      receive->immediate_ = h.immediate;
      receive->received_ = 0;
      receive->deadline_ = new_deadline();
      arrived_.push_back(*receive);
    }
  }
  if (!ok(result)) {
    ZC_SDK_LOG_DEBUG("rdma: write of {} bytes at {:#x}+{} refused: {}", h.length, h.export_id,
                     h.offset, status_name(result));
    ack_op(h, result, 0);
    return UCS_OK;  // a rendezvous payload is released unread
  }
  if (!rendezvous) {
    if (length != 0) std::memcpy(claim.data(), data, length);
    claim.reset();
    if (receive != nullptr) receive->delivered_ = true;
    ack_op(h, status::success, 0);
    deliver_ready();
    return UCS_OK;
  }
  // The claim rides with a worker-owned record until UCX has written the bytes: the export
  // cannot be unmapped under the transfer, and the record outlives this context if need be.
  internal::reply* r = worker_->new_reply();
  if (r == nullptr) {
    ack_op(h, status::no_memory, 0);  // fails the connection (see send_reply)
    return UCS_OK;
  }
  r->worker = worker_.get();
  r->owner_slot = slot_;
  r->owner_nonce = nonce_;
  r->receive = receive;
  r->receive_generation = receive != nullptr ? receive->generation_ : 0;
  r->header = h;
  uint8_t* dst = claim.data();
  r->claim = std::move(claim);
  worker_->receive_write(r, data, dst, length);
  return UCS_INPROGRESS;
}

void context::write_landed(internal::reply* r, int ucs_status) noexcept {
  status result = from_ucs(ucs_status);
  r->claim.reset();
  wire_header request = r->header;
  auto* receive = static_cast<receive_task*>(r->receive);
  // The receive may have been failed and handed back (even re-posted) meanwhile: only the same
  // use of it is completed here.
  if (receive != nullptr && arrived_.contains(*receive) &&
      receive->generation_ == r->receive_generation) {
    if (!ok(result)) receive->outcome_ = result;
    receive->delivered_ = true;
  }
  worker_->release(r);
  ack_op(request, result, 0);
  deliver_ready();
}

void context::on_read(const wire_header& h) {
  core::export_table::claim claim;
  status result = serving_state();
  if (ok(result)) {
    result = core::has(permissions_, access::rdma_read)
                 ? core::export_table::acquire(h.export_id, h.export_key, h.offset, h.length,
                                               access::rdma_read, claim)
                 : status::not_permitted;
  }
  wire_header reply{};
  reply.code = op::read_reply;
  reply.id = h.id;
  reply.status = static_cast<uint32_t>(result);
  if (!ok(result)) {
    ZC_SDK_LOG_DEBUG("rdma: read of {} bytes at {:#x}+{} refused: {}", h.length, h.export_id,
                     h.offset, status_name(result));
    send_reply(reply, nullptr, 0);
    return;
  }
  // The claim rides with the reply until UCX has sent the bytes.
  internal::reply* r = worker_->new_reply();
  if (r == nullptr) {
    reply.status = static_cast<uint32_t>(status::no_memory);
    send_reply(reply, nullptr, 0);  // fails the connection
    return;
  }
  const uint8_t* src = claim.data();
  r->claim = std::move(claim);
  send_reply(reply, src, h.length, r);
}

void context::on_atomic(const wire_header& h) {
  const bool set = (h.flags & internal::atomic_set) != 0;
  const access needed = set ? access::rdma_write : access::rdma_atomic;
  core::export_table::claim claim;
  status result = serving_state();
  if (ok(result)) {
    result = core::has(permissions_, needed)
                 ? core::export_table::acquire(h.export_id, h.export_key, h.offset,
                                               sizeof(uint64_t), needed, claim)
                 : status::not_permitted;
  }
  if (ok(result) && reinterpret_cast<uintptr_t>(claim.data()) % alignof(uint64_t) != 0)
    result = status::invalid_value;
  uint64_t old = 0;
  if (ok(result)) {
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(claim.data()));
    if (set) {
      old = word.exchange(h.operand0);
    } else if ((h.flags & internal::atomic_fetch_add) != 0) {
      old = word.fetch_add(h.operand0);
    } else {
      old = h.operand0;
      word.compare_exchange_strong(old, h.operand1);
    }
  }
  ack_op(h, result, old);
}

}  // namespace zc::rdma
