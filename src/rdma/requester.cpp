// rdma::context, requester side: submitting sends, reads, writes, atomics and sync-event
// operations, and completing them from the peer's acknowledgements and replies.
#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstring>

#include "core/log.hpp"
#include "rdma/context.hpp"
#include "rdma/internal/context_hooks.hpp"
#include "rdma/internal/ucs_status.hpp"
#include "rdma/internal/ucx_worker.hpp"

namespace zc::rdma {

using core::access;
using core::steady_clock;
using internal::from_ucs;
using internal::op;
using internal::task_kind;
using internal::wire_header;

namespace {

// Messages of one context that UCX has accepted but not yet sent: past this, submit answers
// `again` (back-pressure) instead of queueing without bound inside UCX.
constexpr uint32_t max_unsent = 1024;

bool local_writable(const core::buffer& b) {
  return !b.map().is_remote() && core::has(b.map().permissions(), access::local_read_write);
}

// Op ids name the task on the wire: kind, a generation (so a late reply for an earlier use of
// the same task finds no match) and the task's pool index.
uint64_t make_op_id(task_kind kind, uint32_t generation, uint32_t index) {
  return uint64_t(kind) << 56 | uint64_t(generation & 0xFFFFFF) << 32 | index;
}

}  // namespace

status context::check_submittable(task& t) const noexcept {
  if (state() != core::context_state::running || ep_ == nullptr) return status::bad_state;
  if (t.list_ != nullptr) return status::in_progress;
  if (&t.owner() != this) return status::invalid_value;
  return status::success;
}

status context::post(task& t, const void* data, size_t length) noexcept {
  if (unsent_ >= max_unsent) return status::again;
  // The owed acknowledgement rides along, unless replies of this pass are still queued: one of
  // them may refuse an earlier send, and the acknowledgement must not overtake it.
  const bool carried = !worker_->replies_queued() && carry_ack(t.header_);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &internal::context_hooks::on_send_complete;
  param.user_data = &t;
  ucs_status_ptr_t req =
      ucp_am_send_nbx(ep_, internal::am_id, &t.header_, internal::header_size_for(t.header_.code),
                      data, length, &param);
  if (UCS_PTR_IS_ERR(req)) {
    if (carried) {  // it did not go out after all
      ack_pending_ = true;
      worker_->want_flush(*this);
    }
    return from_ucs(UCS_PTR_STATUS(req));
  }
  if (req != nullptr) {
    // UCX reads the header and the source until it calls back: the task waits for that too.
    t.send_request_ = req;
    ++unsent_;
  }
  return status::success;
}

void context::send_done(task& t, int ucs_status) noexcept {
  if (unsent_ > 0) --unsent_;
  if (ucs_status != UCS_OK && (sends_.contains(t) || ops_.contains(t))) {
    // The message never left: no reply will come, and the sequence of our sends now has a hole
    // the peer would take for a protocol violation. The connection cannot go on.
    finish(t, from_ucs(ucs_status));
    note_failure(from_ucs(ucs_status) == status::shutdown ? status::connection_reset
                                                          : from_ucs(ucs_status));
    return;
  }
  release_if_unreferenced(t);
}

status context::post_send(task& t, task_kind kind, const core::buffer& src, uint16_t flags,
                          uint32_t immediate) noexcept {
  if (src.map().is_remote()) return status::invalid_value;
  wire_header& h = t.header_;
  h = {};
  h.dst_context = peer_slot_;
  h.dst_nonce = peer_nonce_;
  h.src_nonce = nonce_;
  h.code = op::send;
  h.flags = flags;
  h.seq = static_cast<uint32_t>(next_send_seq_);
  h.immediate = immediate;
  if (status s = post(t, src.data(), src.data_length()); !ok(s)) return s;
  // Completion is the peer's acknowledgement (data delivered), and UCX letting go of the source.
  t.kind_ = kind;
  t.wire_id_ = next_send_seq_++;
  t.deadline_ = new_deadline();
  sends_.push_back(t);
  task_submitted();
  return status::success;
}

status context::submit(receive_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.dst_ == nullptr || !local_writable(*t.dst_)) return status::invalid_value;
  t.kind_ = task_kind::receive;
  t.generation_++;  // names this use of the task to a rendezvous write still landing
  t.delivered_ = false;
  t.has_immediate_ = false;
  t.from_write_ = false;
  t.received_ = 0;
  t.outcome_ = status::success;
  posted_.push_back(t);
  task_submitted();
  return status::success;
}

status context::submit(send_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.src_ == nullptr) return status::invalid_value;
  const bool imm = t.with_immediate_;
  return post_send(t, imm ? task_kind::send_imm : task_kind::send, *t.src_,
                   imm ? internal::has_immediate : 0, t.immediate_);
}

status context::post_remote(task& t, task_kind kind, op code, const core::memory_map& remote_map,
                            uint64_t remote_address, uint64_t length, access needed,
                            const void* data, uint16_t flags) noexcept {
  if (!remote_map.is_remote()) return status::invalid_value;
  const core::remote_region& region = remote_map.remote();
  // Checked here for a clear early error; the owner checks again, as it must.
  if (!core::has(region.permissions, needed)) return status::not_permitted;
  if (remote_address < region.base || remote_address - region.base > region.length ||
      length > region.length - (remote_address - region.base))
    return status::invalid_value;
  const uint64_t id = make_op_id(kind, t.generation_ + 1, t.pool_index());
  wire_header& h = t.header_;
  h.dst_context = peer_slot_;
  h.dst_nonce = peer_nonce_;
  h.src_nonce = nonce_;
  h.code = code;
  h.flags = flags;
  h.status = 0;
  h.id = id;
  h.export_key = region.key;
  h.export_id = region.export_id;
  h.offset = remote_address - region.base;
  h.length = length;
  if (status s = post(t, data, code == op::write ? length : 0); !ok(s)) return s;
  t.generation_++;
  t.kind_ = kind;
  t.wire_id_ = id;
  t.deadline_ = new_deadline();
  ops_.push_back(t);
  task_submitted();
  return status::success;
}

status context::submit(read_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.src_ == nullptr || t.dst_ == nullptr || !local_writable(*t.dst_))
    return status::invalid_value;
  const size_t length = t.src_->data_length();
  if (length > t.dst_->tail_room()) return status::invalid_value;
  t.header_ = {};
  return post_remote(t, task_kind::read, op::read, t.src_->map(),
                     reinterpret_cast<uintptr_t>(t.src_->data()), length, access::rdma_read,
                     nullptr, 0);
}

status context::submit(write_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.src_ == nullptr || t.dst_ == nullptr || t.src_->map().is_remote())
    return status::invalid_value;
  const size_t length = t.src_->data_length();
  // Appended after the destination's data section, as DOCA does (seed 003).
  if (length > t.dst_->tail_room()) return status::invalid_value;
  const bool imm = t.with_immediate_;
  t.header_ = {};
  t.header_.immediate = t.immediate_;
  return post_remote(t, imm ? task_kind::write_imm : task_kind::write, op::write, t.dst_->map(),
                     reinterpret_cast<uintptr_t>(t.dst_->tail()), length, access::rdma_write,
                     t.src_->data(), imm ? internal::has_immediate : 0);
}

status context::submit(atomic_cmp_swp_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.dst_ == nullptr || t.result_ == nullptr || !local_writable(*t.result_) ||
      t.result_->tail_room() < sizeof(uint64_t))
    return status::invalid_value;
  t.header_ = {};
  t.header_.operand0 = t.compare_;
  t.header_.operand1 = t.swap_;
  return post_remote(t, task_kind::cmp_swp, op::atomic, t.dst_->map(),
                     reinterpret_cast<uintptr_t>(t.dst_->data()), sizeof(uint64_t),
                     access::rdma_atomic, nullptr, 0);
}

status context::submit(atomic_fetch_add_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.dst_ == nullptr || t.result_ == nullptr || !local_writable(*t.result_) ||
      t.result_->tail_room() < sizeof(uint64_t))
    return status::invalid_value;
  t.header_ = {};
  t.header_.operand0 = t.add_;
  return post_remote(t, task_kind::fetch_add, op::atomic, t.dst_->map(),
                     reinterpret_cast<uintptr_t>(t.dst_->data()), sizeof(uint64_t),
                     access::rdma_atomic, nullptr, internal::atomic_fetch_add);
}

status context::submit(sync_event_get_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.event_ == nullptr || t.result_ == nullptr || !local_writable(*t.result_) ||
      t.result_->tail_room() < sizeof(uint64_t))
    return status::invalid_value;
  t.header_ = {};
  return post_remote(t, task_kind::event_get, op::read, *t.event_, t.event_->remote().base,
                     sizeof(uint64_t), access::rdma_read, nullptr, 0);
}

status context::submit(sync_event_set_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.event_ == nullptr || t.src_ == nullptr || t.src_->map().is_remote() ||
      t.src_->data_length() < sizeof(uint64_t))
    return status::invalid_value;
  // An atomic store on the owner, not a byte copy: a set must not tear against an add.
  t.header_ = {};
  std::memcpy(&t.header_.operand0, t.src_->data(), sizeof(uint64_t));
  return post_remote(t, task_kind::event_set, op::atomic, *t.event_, t.event_->remote().base,
                     sizeof(uint64_t), access::rdma_write, nullptr, internal::atomic_set);
}

status context::submit(sync_event_add_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.event_ == nullptr || t.result_ == nullptr || !local_writable(*t.result_) ||
      t.result_->tail_room() < sizeof(uint64_t))
    return status::invalid_value;
  t.header_ = {};
  t.header_.operand0 = t.add_;
  return post_remote(t, task_kind::event_add, op::atomic, *t.event_, t.event_->remote().base,
                     sizeof(uint64_t), access::rdma_atomic, nullptr, internal::atomic_fetch_add);
}

task* context::find_op(uint64_t id, op reply) noexcept {
  auto kind = static_cast<task_kind>(id >> 56);
  auto index = static_cast<uint32_t>(id);
  auto& p = *pools_;
  task* t = nullptr;
  // A reply must fit the kind of task it names: a forged read reply for a pending write would
  // otherwise land in the write's (remote) buffer.
  if (reply == op::read_reply) {
    switch (kind) {
      case task_kind::read:
        t = std::get<core::task_pool<read_task>>(p).at(index);
        break;
      case task_kind::event_get:
        t = std::get<core::task_pool<sync_event_get_task>>(p).at(index);
        break;
      default:
        return nullptr;
    }
  } else {
    switch (kind) {
      case task_kind::write:
        t = std::get<core::task_pool<write_task>>(p).at(index);
        break;
      case task_kind::write_imm:
        t = std::get<core::task_pool<write_imm_task>>(p).at(index);
        break;
      case task_kind::cmp_swp:
        t = std::get<core::task_pool<atomic_cmp_swp_task>>(p).at(index);
        break;
      case task_kind::fetch_add:
        t = std::get<core::task_pool<atomic_fetch_add_task>>(p).at(index);
        break;
      case task_kind::event_set:
        t = std::get<core::task_pool<sync_event_set_task>>(p).at(index);
        break;
      case task_kind::event_add:
        t = std::get<core::task_pool<sync_event_add_task>>(p).at(index);
        break;
      default:
        return nullptr;
    }
  }
  // A late reply for a task that already failed (and may have been reused) finds no match.
  return t != nullptr && ops_.contains(*t) && t->wire_id_ == id && t->kind_ == kind ? t : nullptr;
}

bool context::widen_send_seq(uint32_t wire, uint64_t& out) const noexcept {
  const uint64_t last = next_send_seq_ - 1;
  // How far behind our last send the named one is; "behind" by 2^31 or more is ahead of it. At
  // most as far as the number before our first send, which names none of them.
  const uint32_t behind = static_cast<uint32_t>(last) - wire;
  if (behind >= (1u << 31) || behind > next_send_seq_ - first_seq_) return false;
  out = last - behind;
  return true;
}

void context::on_sends_acked(uint32_t wire) {
  uint64_t up_to = 0;
  if (!widen_send_seq(wire, up_to)) {
    ZC_SDK_LOG_ERROR("rdma: peer acknowledged send {} that was never sent", wire);
    note_failure(status::io_failed);
    return;
  }
  highest_acked_ = std::max(highest_acked_, up_to);
  while (!sends_.empty() && sends_.front()->wire_id_ <= up_to)
    finish(*sends_.front(), status::success);
}

void context::on_send_nacked(uint32_t wire, status why) {
  uint64_t seq = 0;
  if (!widen_send_seq(wire, seq) || seq < first_seq_) {
    ZC_SDK_LOG_ERROR("rdma: peer refused send {} that was never sent", wire);
    note_failure(status::io_failed);
    return;
  }
  // An acknowledgement is final: a refusal of a send it covered would turn a success the caller
  // was given into a failure.
  if (seq <= highest_acked_) {
    ZC_SDK_LOG_ERROR("rdma: peer refused send {} after acknowledging it; failing the connection",
                     wire);
    note_failure(status::io_failed);
    return;
  }
  if (ok(why)) why = status::io_failed;  // a refusal that claims success is still a refusal
  for (task* t = sends_.front(); t != nullptr; t = t->next_in_list_) {
    if (t->wire_id_ == seq) {
      finish(*t, why);
      return;
    }
  }
}

int context::on_read_reply(const wire_header& h, void* data, size_t length, bool rendezvous) {
  task* t = find_op(h.id, op::read_reply);
  // Late or forged: not ours to receive. UCS_OK lets UCX release a rendezvous payload (the
  // sender's claim on its export ends), rather than pinning it forever.
  if (t == nullptr) return UCS_OK;
  status result = status_from_wire(h.status);
  if (ok(result) && length != t->header_.length) result = status::io_failed;
  if (!ok(result)) {
    finish(*t, result);
    return UCS_OK;
  }
  core::buffer* dst = t->kind_ == task_kind::read ? static_cast<read_task*>(t)->dst_
                                                  : static_cast<sync_event_get_task*>(t)->result_;
  if (!rendezvous) {
    if (length != 0) std::memcpy(dst->tail(), data, length);
    dst->append(length);
    finish(*t, status::success);
    return UCS_OK;
  }
  return receive_rendezvous(*t, data, dst->tail(), length);
}

void context::on_ack_op(const wire_header& h) {
  task* t = find_op(h.id, op::ack_op);
  if (t == nullptr) return;
  status result = status_from_wire(h.status);
  core::buffer* result_buffer = nullptr;
  switch (t->kind_) {
    case task_kind::cmp_swp:
      result_buffer = static_cast<atomic_cmp_swp_task*>(t)->result_;
      break;
    case task_kind::fetch_add:
      result_buffer = static_cast<atomic_fetch_add_task*>(t)->result_;
      break;
    case task_kind::event_add:
      result_buffer = static_cast<sync_event_add_task*>(t)->result_;
      break;
    case task_kind::write:
    case task_kind::write_imm:
      if (ok(result)) static_cast<write_task*>(t)->dst_->append(t->header_.length);
      break;
    default:
      break;
  }
  if (ok(result) && result_buffer != nullptr) {
    std::memcpy(result_buffer->tail(), &h.operand0, sizeof(uint64_t));
    result_buffer->append(sizeof(uint64_t));
  }
  finish(*t, result);
}

}  // namespace zc::rdma
