// rdma::context, protocol: dispatch of the peer's messages (already decoded and routed by the
// worker), replies and acknowledgements, and rendezvous payloads received straight into their
// destination.
#include <ucp/api/ucp.h>

#include "core/log.hpp"
#include "rdma/context.hpp"
#include "rdma/internal/context_hooks.hpp"
#include "rdma/internal/ucs_status.hpp"
#include "rdma/internal/ucx_worker.hpp"

namespace zc::rdma {

using internal::from_ucs;
using internal::op;
using internal::task_kind;
using internal::wire_header;

int context::on_message(const wire_header& h, void* data, size_t length, bool rendezvous) {
  // Any message may carry the peer's acknowledgement of our sends; it covers only sends the
  // peer had settled before this message, so it is taken first.
  if ((h.flags & internal::has_ack) != 0) {
    // A refusal that also acknowledges the send it refuses says two things of one send: taking
    // the acknowledgement first would complete it with success, and the refusal would be lost.
    if (h.code == op::nack_send && static_cast<int32_t>(h.acked - h.seq) >= 0) {
      ZC_SDK_LOG_ERROR("rdma: peer refused send {} and acknowledged it in one message", h.seq);
      note_failure(status::io_failed);
      return UCS_OK;
    }
    on_sends_acked(h.acked);
    if (pending_failure_ != status::success) return UCS_OK;
  }
  switch (h.code) {
    case op::send:
      return on_send(h, data, length, rendezvous);
    case op::write:
      return on_write(h, data, length, rendezvous);
    case op::read:
      on_read(h);
      break;
    case op::atomic:
      on_atomic(h);
      break;
    case op::read_reply:
      return on_read_reply(h, data, length, rendezvous);
    case op::ack_op:
      on_ack_op(h);
      break;
    case op::ack_sends:
      break;  // its acknowledgement was taken above
    case op::nack_send:
      on_send_nacked(h.seq, status_from_wire(h.status));
      break;
    case op::disconnect:
      ZC_SDK_LOG_INFO("rdma: peer context disconnected");
      peer_left_ = true;
      note_failure(status::connection_reset);
      break;
  }
  // Anything else carried no payload we asked for: UCX releases it.
  return UCS_OK;
}

void context::send_reply(wire_header& h, const void* data, size_t length, internal::reply* r) {
  if (r == nullptr) r = worker_->new_reply();
  if (r == nullptr) {
    ZC_SDK_LOG_ERROR(
        "rdma: too many replies outstanding; the peer floods us: failing the "
        "connection");
    note_failure(status::no_memory);
    return;
  }
  r->header = h;
  // Queued replies go out in order, behind any refusal of an earlier send: an acknowledgement
  // they carry can never overtake a nack.
  carry_ack(r->header);
  r->header.dst_context = peer_slot_;
  r->header.dst_nonce = peer_nonce_;
  r->header.src_nonce = nonce_;
  r->header_length = internal::header_size_for(h.code);
  r->ep = ep_;
  r->data = data;
  r->length = length;
  if (ep_ == nullptr) {
    ZC_SDK_LOG_WARN("rdma: reply dropped: context is not connected");
    worker_->release(r);
    return;
  }
  worker_->queue(r);
}

void context::nack_send(uint64_t seq, status why) {
  // Every send delivered before this one is acknowledged by the nack itself (see send_reply):
  // the peer takes that acknowledgement before the refusal.
  wire_header h{};
  h.code = op::nack_send;
  h.seq = static_cast<uint32_t>(seq);
  h.status = static_cast<uint32_t>(why);
  send_reply(h, nullptr, 0);
}

bool context::carry_ack(wire_header& h) noexcept {
  if (!ack_pending_) return false;
  ack_pending_ = false;
  h.flags |= internal::has_ack;
  h.acked = static_cast<uint32_t>(ack_seq_);
  return true;
}

void context::flush_acks() {
  // Nothing else went out to carry the acknowledgement in the pass that owed it.
  if (!ack_pending_ || ep_ == nullptr) return;
  wire_header h{};
  h.code = op::ack_sends;
  send_reply(h, nullptr, 0);
}

void context::ack_op(const wire_header& request, status result, uint64_t value) {
  wire_header h{};
  h.code = op::ack_op;
  h.id = request.id;
  h.status = static_cast<uint32_t>(result);
  h.operand0 = value;
  send_reply(h, nullptr, 0);
}

int context::receive_rendezvous(task& t, void* data, void* dst, size_t length) noexcept {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = &internal::context_hooks::on_rendezvous_received;
  param.user_data = &t;
  ucs_status_ptr_t req = ucp_am_recv_data_nbx(worker_->handle(), data, dst, length, &param);
  if (UCS_PTR_IS_ERR(req)) {
    // A failed receive has still started: UCX keeps the descriptor until it is released, and
    // only then lets the sender go.
    ucp_am_data_release(worker_->handle(), data);
    rendezvous_done(t, UCS_PTR_STATUS(req));
    return UCS_INPROGRESS;
  }
  if (req == nullptr) {
    rendezvous_done(t, UCS_OK);
  } else {
    // UCX writes into the task's buffer until it calls back; the task waits for that. A
    // rendezvous cannot be cancelled (ucp_request_cancel ignores it): a connection that gives up
    // on it is closed, which ends it.
    t.recv_request_ = req;
  }
  return UCS_INPROGRESS;
}

void context::rendezvous_done(task& t, int ucs_status) noexcept {
  const status result = from_ucs(ucs_status);
  if (parked_.contains(t)) {  // given up on earlier (failure, timeout): now UCX let go of it
    release_if_unreferenced(t);
    return;
  }
  if (t.kind_ == task_kind::receive) {
    if (!arrived_.contains(t)) return;
    auto& r = static_cast<receive_task&>(t);
    if (ok(result)) {
      r.dst_->append(r.received_);
    } else {
      r.outcome_ = result;
      nack_send(r.wire_id_, result);
    }
    r.delivered_ = true;
    deliver_ready();
    return;
  }
  if (!ops_.contains(t)) return;
  // A read reply that landed straight in the task's destination.
  if (ok(result)) {
    core::buffer* dst = t.kind_ == task_kind::read ? static_cast<read_task&>(t).dst_
                                                   : static_cast<sync_event_get_task&>(t).result_;
    dst->append(t.header_.length);
  }
  finish(t, result);
}

}  // namespace zc::rdma
