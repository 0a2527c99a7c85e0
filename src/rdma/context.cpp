#include "rdma/context.hpp"

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstring>

#include "core/blob.hpp"
#include "core/bytes.hpp"
#include "core/export_table.hpp"
#include "core/log.hpp"
#include "rdma/internal/host_process.hpp"
#include "rdma/internal/ucx_worker.hpp"

namespace zc::rdma {

using core::access;
using core::steady_clock;
using internal::op;
using internal::task_kind;
using internal::wire_header;

namespace internal {

void task_list::push_back(task& t) noexcept {
  t.list_ = this;
  t.prev_ = tail_;
  t.next_in_list_ = nullptr;
  if (tail_ != nullptr) {
    tail_->next_in_list_ = &t;
  } else {
    head_ = &t;
  }
  tail_ = &t;
}

void task_list::remove(task& t) noexcept {
  if (t.list_ != this) return;
  if (t.prev_ != nullptr) {
    t.prev_->next_in_list_ = t.next_in_list_;
  } else {
    head_ = t.next_in_list_;
  }
  if (t.next_in_list_ != nullptr) {
    t.next_in_list_->prev_ = t.prev_;
  } else {
    tail_ = t.prev_;
  }
  t.prev_ = t.next_in_list_ = nullptr;
  t.list_ = nullptr;
}

}  // namespace internal

namespace {

// Connection blob payload: u64 process token, u32 slot, u32 nonce, u64 host id, u32 pid,
// u64 process start time, then the UCX worker address (u32 length + bytes).
constexpr size_t min_worker_address = 16;
// How often a same-host peer's process is looked up in /proc.
constexpr auto liveness_period = std::chrono::milliseconds(250);

status from_ucs(int s) {
  switch (static_cast<ucs_status_t>(s)) {
    case UCS_OK:
      return status::success;
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_UNREACHABLE:
      return status::connection_reset;
    case UCS_ERR_CANCELED:
      return status::shutdown;
    case UCS_ERR_NO_MEMORY:
      return status::no_memory;
    default:
      return status::io_failed;
  }
}

// Space left after a buffer's data section.
size_t tail_room(const core::buffer& b) {
  return b.capacity() - static_cast<size_t>(b.data() - b.head()) - b.data_length();
}
uint8_t* tail(const core::buffer& b) {
  return b.data() + b.data_length();
}

bool local_writable(const core::buffer& b) {
  return !b.map().is_remote() && core::has(b.map().permissions(), access::local_read_write);
}

void on_rendezvous_received(void* request, ucs_status_t s, size_t, void* user_data) {
  auto* t = static_cast<task*>(user_data);
  static_cast<context&>(t->owner()).rendezvous_done(t, request, s);
}

void on_reply_landed(void* request, ucs_status_t s, size_t, void* user_data) {
  auto* r = static_cast<internal::reply*>(user_data);
  ucp_request_free(request);
  if (context* owner = r->worker->find(r->owner_slot, r->owner_nonce)) {
    owner->reply_landed(r, s);
  } else {
    r->worker->release(r);
  }
}

uint64_t make_op_id(task_kind kind, uint32_t generation, uint32_t index) {
  return uint64_t(kind) << 56 | uint64_t(generation & 0xFFFFFF) << 32 | index;
}

}  // namespace

context::context(core::progress_engine& engine, const core::device& device)
    : core::context(engine), worker_(internal::ucx_worker::for_engine(engine, device)) {
  slot_ = worker_->add(*this, nonce_);
}

context::~context() {
  fail_all(status::shutdown);
  close_endpoint(failure_ == status::success);
  // UCX still holds receives that write into our tasks: cancel them and let their callbacks run
  // before the tasks go away.
  auto give_up = steady_clock::now() + std::chrono::seconds(2);
  while (rendezvous_in_flight_ != 0 && steady_clock::now() < give_up)
    ucp_worker_progress(worker_->handle());
  worker_->remove(slot_);
}

void context::require_idle(const char* what) const {
  if (state() != core::context_state::idle)
    throw status_error(status::bad_state,
                       std::string("rdma context: ") + what + " is only allowed while idle");
}

void context::set_permissions(access permissions) {
  require_idle("set_permissions");
  permissions_ = permissions;
}

void context::set_task_timeout(std::chrono::milliseconds timeout) {
  require_idle("set_task_timeout");
  task_timeout_ = timeout;
}

core::context_state context::on_start() {
  failure_ = status::success;
  peer_error_ = 0;
  peer_left_ = false;
  return core::context_state::starting;
}

void context::on_stop() {
  fail_all(status::shutdown);
  close_endpoint(failure_ == status::success);
}

std::vector<uint8_t> context::export_connection() {
  if (state() != core::context_state::starting)
    throw status_error(status::bad_state, "rdma context: export_connection needs start() first");
  std::vector<uint8_t> payload;
  byte_writer w(payload);
  w.u64(core::process_token());
  w.u32(slot_);
  w.u32(nonce_);
  const auto me = internal::host_process::self();
  w.u64(me.host_id);
  w.u32(me.pid);
  w.u64(me.start_time);
  w.sized_bytes(worker_->address());
  return core::frame_blob(core::blob_kind::rdma_connection, payload);
}

void context::connect(std::span<const uint8_t> remote_blob) {
  if (state() != core::context_state::starting)
    throw status_error(status::bad_state, "rdma context: connect needs start() first");
  if (ep_ != nullptr) throw status_error(status::already_exist, "rdma context already connected");
  std::span<const uint8_t> payload;
  throw_if_failed(core::parse_blob(remote_blob, core::blob_kind::rdma_connection, payload),
                  "malformed RDMA connection blob");
  byte_reader r(payload);
  r.u64();  // the peer's process token: informational (a peer may live in this process)
  uint32_t peer_slot = r.u32();
  uint32_t peer_nonce = r.u32();
  internal::host_process peer;
  peer.host_id = r.u64();
  peer.pid = r.u32();
  peer.start_time = r.u64();
  auto address = r.sized_bytes();
  if (!r.ok() || r.remaining() != 0 || address.size() < min_worker_address || peer_nonce == 0)
    throw status_error(status::invalid_value, "malformed RDMA connection blob");

  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = [](void* arg, ucp_ep_h ep, ucs_status_t s) {
    context::on_endpoint_error(arg, ep, s);
  };
  params.err_handler.arg = this;
  ucs_status_t s = ucp_ep_create(worker_->handle(), &params, &ep_);
  if (s != UCS_OK) {
    ep_ = nullptr;
    throw status_error(status::connection_reset,
                       std::string("cannot reach RDMA peer: ") + ucs_status_string(s));
  }
  peer_slot_ = peer_slot;
  peer_nonce_ = peer_nonce;
  // Another process on this host: watch it directly (a peer in this process dies with us).
  const auto me = internal::host_process::self();
  watch_peer_ = peer.host_id == me.host_id && peer.pid != me.pid && peer.start_time != 0;
  peer_process_ = peer;
  next_liveness_check_ = steady_clock::now() + liveness_period;
  set_state(core::context_state::running);
}

void context::on_endpoint_error(void* arg, ucp_ep_h, int s) {
  // Inside UCX's progress: only note it; poll() fails the tasks and closes the endpoint.
  auto* self = static_cast<context*>(arg);
  if (self->peer_error_ == 0) self->peer_error_ = s;
}

void context::close_endpoint(bool tell_peer) noexcept {
  if (ep_ == nullptr) return;
  if (tell_peer) {
    wire_header h{};
    h.dst_context = peer_slot_;
    h.dst_nonce = peer_nonce_;
    h.code = op::disconnect;
    ucp_request_param_t bye{};
    ucs_status_ptr_t req =
        ucp_am_send_nbx(ep_, internal::am_id, &h, internal::short_header_size, nullptr, 0, &bye);
    if (UCS_PTR_IS_PTR(req)) {
      auto give_up = steady_clock::now() + std::chrono::milliseconds(200);
      while (ucp_request_check_status(req) == UCS_INPROGRESS && steady_clock::now() < give_up)
        ucp_worker_progress(worker_->handle());
      ucp_request_free(req);
    }
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &param);
  if (UCS_PTR_IS_PTR(req)) {
    auto give_up = steady_clock::now() + std::chrono::milliseconds(500);
    while (ucp_request_check_status(req) == UCS_INPROGRESS && steady_clock::now() < give_up)
      ucp_worker_progress(worker_->handle());
    ucp_request_free(req);
  }
  ep_ = nullptr;
}

// ---------------------------------------------------------------------------------------------
// Requester side: submitting tasks.

status context::check_submittable(task& t) const noexcept {
  if (state() != core::context_state::running || ep_ == nullptr) return status::bad_state;
  if (t.list_ != nullptr) return status::in_progress;
  if (&t.owner() != this) return status::invalid_value;
  return status::success;
}

void context::finish(task& t, status result) noexcept {
  if (t.list_ != nullptr) t.list_->remove(t);
  if (t.ucx_request_ != nullptr) {
    // The receive into this task's buffer is abandoned; its callback will see the mismatch.
    ucp_request_cancel(worker_->handle(), t.ucx_request_);
    t.ucx_request_ = nullptr;
  }
  complete(t, result);
}

status context::submit(receive_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.dst_ == nullptr || !local_writable(*t.dst_)) return status::invalid_value;
  t.kind_ = task_kind::receive;
  t.delivered_ = false;
  t.has_immediate_ = false;
  t.received_ = 0;
  posted_.push_back(t);
  task_submitted();
  return status::success;
}

status context::post_send(task& t, task_kind kind, const core::buffer& src, uint16_t flags,
                          uint32_t immediate) noexcept {
  if (src.map().is_remote()) return status::invalid_value;
  wire_header& h = t.header_;
  h = {};
  h.dst_context = peer_slot_;
  h.dst_nonce = peer_nonce_;
  h.code = op::send;
  h.flags = flags;
  h.id = next_send_seq_;
  h.immediate = immediate;
  ucp_request_param_t param{};
  ucs_status_ptr_t req = ucp_am_send_nbx(ep_, internal::am_id, &h, internal::short_header_size,
                                         src.data(), src.data_length(), &param);
  if (UCS_PTR_IS_ERR(req)) return from_ucs(UCS_PTR_STATUS(req));
  // Completion is the peer's acknowledgement; UCX's own request is not needed.
  if (req != nullptr) ucp_request_free(req);
  t.kind_ = kind;
  t.wire_id_ = next_send_seq_++;
  t.deadline_ = steady_clock::now() + task_timeout_;
  sends_.push_back(t);
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
  t.generation_++;
  t.kind_ = kind;
  t.wire_id_ = make_op_id(kind, t.generation_, t.pool_index());
  wire_header& h = t.header_;
  h.dst_context = peer_slot_;
  h.dst_nonce = peer_nonce_;
  h.code = code;
  h.flags = flags;
  h.status = 0;
  h.id = t.wire_id_;
  h.export_key = region.key;
  h.export_id = region.export_id;
  h.offset = remote_address - region.base;
  h.length = length;
  ucp_request_param_t param{};
  ucs_status_ptr_t req = ucp_am_send_nbx(ep_, internal::am_id, &h, internal::full_header_size, data,
                                         code == op::write ? length : 0, &param);
  if (UCS_PTR_IS_ERR(req)) return from_ucs(UCS_PTR_STATUS(req));
  if (req != nullptr) ucp_request_free(req);
  t.deadline_ = steady_clock::now() + task_timeout_;
  ops_.push_back(t);
  task_submitted();
  return status::success;
}

status context::submit(read_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.src_ == nullptr || t.dst_ == nullptr || !local_writable(*t.dst_))
    return status::invalid_value;
  const size_t length = t.src_->data_length();
  if (length > tail_room(*t.dst_)) return status::invalid_value;
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
  if (length > t.dst_->capacity() - static_cast<size_t>(t.dst_->data() - t.dst_->head()))
    return status::invalid_value;
  const bool imm = t.with_immediate_;
  t.header_ = {};
  t.header_.immediate = t.immediate_;
  return post_remote(t, imm ? task_kind::write_imm : task_kind::write, op::write, t.dst_->map(),
                     reinterpret_cast<uintptr_t>(t.dst_->data()), length, access::rdma_write,
                     t.src_->data(), imm ? internal::has_immediate : 0);
}

status context::submit(atomic_cmp_swp_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.dst_ == nullptr || t.result_ == nullptr || !local_writable(*t.result_) ||
      tail_room(*t.result_) < sizeof(uint64_t))
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
      tail_room(*t.result_) < sizeof(uint64_t))
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
      tail_room(*t.result_) < sizeof(uint64_t))
    return status::invalid_value;
  t.header_ = {};
  return post_remote(t, task_kind::event_get, op::read, *t.event_, t.event_->remote().base,
                     sizeof(uint64_t), access::rdma_read, nullptr, 0);
}

status context::submit(sync_event_set_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.event_ == nullptr || t.src_ == nullptr || t.src_->data_length() < sizeof(uint64_t))
    return status::invalid_value;
  t.header_ = {};
  return post_remote(t, task_kind::event_set, op::write, *t.event_, t.event_->remote().base,
                     sizeof(uint64_t), access::rdma_write, t.src_->data(), 0);
}

status context::submit(sync_event_add_task& t) noexcept {
  if (status s = check_submittable(t); !ok(s)) return s;
  if (t.event_ == nullptr || t.result_ == nullptr || !local_writable(*t.result_) ||
      tail_room(*t.result_) < sizeof(uint64_t))
    return status::invalid_value;
  t.header_ = {};
  t.header_.operand0 = t.add_;
  return post_remote(t, task_kind::event_add, op::atomic, *t.event_, t.event_->remote().base,
                     sizeof(uint64_t), access::rdma_atomic, nullptr, internal::atomic_fetch_add);
}

task* context::find_op(uint64_t id) noexcept {
  auto kind = static_cast<task_kind>(id >> 56);
  auto index = static_cast<uint32_t>(id);
  task* t = nullptr;
  switch (kind) {
    case task_kind::read:
      t = std::get<core::task_pool<read_task>>(pools_).at(index);
      break;
    case task_kind::write:
      t = std::get<core::task_pool<write_task>>(pools_).at(index);
      break;
    case task_kind::write_imm:
      t = std::get<core::task_pool<write_imm_task>>(pools_).at(index);
      break;
    case task_kind::cmp_swp:
      t = std::get<core::task_pool<atomic_cmp_swp_task>>(pools_).at(index);
      break;
    case task_kind::fetch_add:
      t = std::get<core::task_pool<atomic_fetch_add_task>>(pools_).at(index);
      break;
    case task_kind::event_get:
      t = std::get<core::task_pool<sync_event_get_task>>(pools_).at(index);
      break;
    case task_kind::event_set:
      t = std::get<core::task_pool<sync_event_set_task>>(pools_).at(index);
      break;
    case task_kind::event_add:
      t = std::get<core::task_pool<sync_event_add_task>>(pools_).at(index);
      break;
    default:
      return nullptr;
  }
  // A late reply for a task that already timed out (and may have been reused) finds no match.
  return t != nullptr && ops_.contains(*t) && t->wire_id_ == id ? t : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Both sides: incoming messages.

int context::on_message(const wire_header& h, void* data, size_t length, bool rendezvous) {
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
      on_read_reply(h, data, length, rendezvous);
      return rendezvous ? UCS_INPROGRESS : UCS_OK;
    case op::ack_op:
      on_ack_op(h);
      break;
    case op::disconnect:
      ZC_SDK_LOG_INFO("rdma: peer context disconnected");
      peer_left_ = true;
      if (peer_error_ == 0) peer_error_ = UCS_ERR_CONNECTION_RESET;
      break;
    case op::ack_sends:
      while (!sends_.empty() && sends_.front()->wire_id_ <= h.id)
        finish(*sends_.front(), status::success);
      break;
    case op::nack_send:
      for (task* t = sends_.front(); t != nullptr; t = t->next_in_list_) {
        if (t->wire_id_ == h.id) {
          finish(*t, status_from_wire(h.status));
          break;
        }
      }
      break;
    default:
      ZC_SDK_LOG_WARN("rdma: dropped a message with unknown op {}", static_cast<int>(h.code));
  }
  return UCS_OK;
}

void context::send_reply(wire_header& h, size_t header_length, const void* data, size_t length,
                         internal::reply* r) {
  if (r == nullptr) r = worker_->new_reply();
  r->header = h;
  r->header.dst_context = peer_slot_;
  r->header.dst_nonce = peer_nonce_;
  r->header_length = header_length;
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
  // Everything delivered before this message is acknowledged first, so acks stay in order.
  flush_acks();
  wire_header h{};
  h.code = op::nack_send;
  h.id = seq;
  h.status = static_cast<uint32_t>(why);
  send_reply(h, internal::short_header_size, nullptr, 0);
}

void context::flush_acks() {
  if (!ack_pending_) return;
  ack_pending_ = false;
  wire_header h{};
  h.code = op::ack_sends;
  h.id = ack_seq_;
  send_reply(h, internal::short_header_size, nullptr, 0);
}

void context::ack_op(const wire_header& request, status result, uint64_t value) {
  wire_header h{};
  h.code = op::ack_op;
  h.id = request.id;
  h.status = static_cast<uint32_t>(result);
  h.operand0 = value;
  send_reply(h, internal::header_size_for(op::ack_op), nullptr, 0);
}

// Completes, in arrival order, every matched receive whose data is in place.
void context::deliver_ready() noexcept {
  while (!arrived_.empty() && arrived_.front()->delivered_) {
    task* t = arrived_.front();
    if (t->wire_id_ != 0) {  // a send (writes with immediate are acknowledged as writes)
      ack_seq_ = t->wire_id_;
      if (!ack_pending_) {
        ack_pending_ = true;
        worker_->want_flush(*this);
      }
    }
    finish(*t, status::success);
  }
}

int context::on_send(const wire_header& h, void* data, size_t length, bool rendezvous) {
  if (state() != core::context_state::running || posted_.empty()) {
    ZC_SDK_LOG_DEBUG("rdma: send {} refused: no receive posted", h.id);
    nack_send(h.id, status::empty);
    return UCS_OK;
  }
  auto& t = static_cast<receive_task&>(*posted_.front());
  posted_.remove(t);
  if (length > tail_room(*t.dst_)) {
    ZC_SDK_LOG_WARN("rdma: a {}-byte message does not fit the posted {}-byte buffer", length,
                    tail_room(*t.dst_));
    complete(t, status::too_big);
    nack_send(h.id, status::too_big);
    return UCS_OK;
  }
  t.wire_id_ = h.id;
  t.has_immediate_ = (h.flags & internal::has_immediate) != 0;
  t.immediate_ = h.immediate;
  t.received_ = length;
  arrived_.push_back(t);
  uint8_t* dst = tail(*t.dst_);
  if (!rendezvous) {
    if (length != 0) std::memcpy(dst, data, length);
    t.dst_->set_data(t.dst_->data(), t.dst_->data_length() + length);
    t.delivered_ = true;
    deliver_ready();
    return UCS_OK;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = &on_rendezvous_received;
  param.user_data = static_cast<task*>(&t);
  ucs_status_ptr_t req = ucp_am_recv_data_nbx(worker_->handle(), data, dst, length, &param);
  if (UCS_PTR_IS_ERR(req)) {
    finish(t, status::io_failed);
    nack_send(h.id, status::io_failed);
  } else if (req == nullptr) {
    t.dst_->set_data(t.dst_->data(), t.dst_->data_length() + length);
    t.delivered_ = true;
    deliver_ready();
  } else {
    t.ucx_request_ = req;
    ++rendezvous_in_flight_;
  }
  return UCS_INPROGRESS;
}

void context::rendezvous_done(task* t, void* request, int ucs_status) noexcept {
  --rendezvous_in_flight_;
  ucp_request_free(request);
  if (t->ucx_request_ != request) return;  // abandoned (timed out or flushed)
  t->ucx_request_ = nullptr;
  status result = from_ucs(ucs_status);
  if (t->kind_ == task_kind::receive) {
    auto& r = static_cast<receive_task&>(*t);
    if (!ok(result)) {
      finish(r, result);
      nack_send(r.wire_id_, result);
      deliver_ready();
      return;
    }
    r.dst_->set_data(r.dst_->data(), r.dst_->data_length() + r.received_);
    r.delivered_ = true;
    deliver_ready();
    return;
  }
  // A read reply that landed straight in the task's destination.
  auto& rt = *t;
  if (ok(result)) {
    core::buffer* dst = rt.kind_ == task_kind::read ? static_cast<read_task&>(rt).dst_
                                                    : static_cast<sync_event_get_task&>(rt).result_;
    dst->set_data(dst->data(), dst->data_length() + rt.header_.length);
  }
  finish(rt, result);
}

// Owner side of a write: checks first, then the bytes land once, straight in the region.
int context::on_write(const wire_header& h, void* data, size_t length, bool rendezvous) {
  status result = status::success;
  core::export_table::claim claim;
  if (!core::has(permissions_, access::rdma_write)) {
    result = status::not_permitted;
  } else if (length != h.length) {
    result = status::invalid_value;
  } else {
    result = core::export_table::acquire(h.export_id, h.export_key, h.offset, h.length,
                                         access::rdma_write, claim);
  }
  receive_task* receive = nullptr;
  if (ok(result) && (h.flags & internal::has_immediate) != 0) {
    if (state() != core::context_state::running || posted_.empty()) {
      result = status::empty;
    } else {
      receive = static_cast<receive_task*>(posted_.front());
      posted_.remove(*receive);
      receive->wire_id_ = 0;
      receive->has_immediate_ = true;
      receive->immediate_ = h.immediate;
      receive->received_ = 0;
      arrived_.push_back(*receive);
    }
  }
  if (!ok(result)) {
    ZC_SDK_LOG_DEBUG("rdma: write of {} bytes at {:#x}+{} refused: {}", h.length, h.export_id,
                     h.offset, status_name(result));
    ack_op(h, result, 0);
    return UCS_OK;  // a rendezvous payload is dropped unread
  }
  if (!rendezvous) {
    if (length != 0) std::memcpy(claim.data(), data, length);
    claim.reset();
    if (receive != nullptr) receive->delivered_ = true;
    ack_op(h, status::success, 0);
    deliver_ready();
    return UCS_OK;
  }
  internal::reply* r = worker_->new_reply();
  r->worker = worker_.get();
  r->owner_slot = slot_;
  r->owner_nonce = nonce_;
  r->receive = receive;
  r->header = h;
  uint8_t* dst = claim.data();
  r->claim = std::move(claim);
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = &on_reply_landed;
  param.user_data = r;
  ucs_status_ptr_t req = ucp_am_recv_data_nbx(worker_->handle(), data, dst, length, &param);
  if (req == nullptr || UCS_PTR_IS_ERR(req))
    reply_landed(r, req == nullptr ? UCS_OK : UCS_PTR_STATUS(req));
  return UCS_INPROGRESS;
}

void context::reply_landed(internal::reply* r, int ucs_status) noexcept {
  status result = from_ucs(ucs_status);
  r->claim.reset();
  wire_header request = r->header;
  if (auto* receive = static_cast<receive_task*>(r->receive)) {
    if (arrived_.contains(*receive)) {
      if (ok(result)) {
        receive->delivered_ = true;
      } else {
        finish(*receive, result);
      }
    }
  }
  worker_->release(r);
  ack_op(request, result, 0);
  deliver_ready();
}

void context::on_read(const wire_header& h) {
  core::export_table::claim claim;
  status result = core::has(permissions_, access::rdma_read)
                      ? core::export_table::acquire(h.export_id, h.export_key, h.offset, h.length,
                                                    access::rdma_read, claim)
                      : status::not_permitted;
  wire_header reply{};
  reply.code = op::read_reply;
  reply.id = h.id;
  reply.status = static_cast<uint32_t>(result);
  if (!ok(result)) {
    ZC_SDK_LOG_DEBUG("rdma: read of {} bytes at {:#x}+{} refused: {}", h.length, h.export_id,
                     h.offset, status_name(result));
    send_reply(reply, internal::short_header_size, nullptr, 0);
    return;
  }
  // The claim rides with the reply until UCX has sent the bytes.
  internal::reply* r = worker_->new_reply();
  const uint8_t* src = claim.data();
  r->claim = std::move(claim);
  send_reply(reply, internal::short_header_size, src, h.length, r);
}

void context::on_atomic(const wire_header& h) {
  core::export_table::claim claim;
  status result = core::has(permissions_, access::rdma_atomic)
                      ? core::export_table::acquire(h.export_id, h.export_key, h.offset,
                                                    sizeof(uint64_t), access::rdma_atomic, claim)
                      : status::not_permitted;
  if (ok(result) && reinterpret_cast<uintptr_t>(claim.data()) % alignof(uint64_t) != 0)
    result = status::invalid_value;
  uint64_t old = 0;
  if (ok(result)) {
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(claim.data()));
    if ((h.flags & internal::atomic_fetch_add) != 0) {
      old = word.fetch_add(h.operand0);
    } else {
      old = h.operand0;
      word.compare_exchange_strong(old, h.operand1);
    }
  }
  ack_op(h, result, old);
}

void context::on_read_reply(const wire_header& h, void* data, size_t length, bool rendezvous) {
  task* t = find_op(h.id);
  if (t == nullptr) return;  // late reply; a rendezvous payload is dropped unread
  status result = status_from_wire(h.status);
  core::buffer* dst = t->kind_ == task_kind::read ? static_cast<read_task*>(t)->dst_
                                                  : static_cast<sync_event_get_task*>(t)->result_;
  if (ok(result) && length != t->header_.length) result = status::io_failed;
  if (!ok(result)) {
    finish(*t, result);
    return;
  }
  if (!rendezvous) {
    if (length != 0) std::memcpy(tail(*dst), data, length);
    dst->set_data(dst->data(), dst->data_length() + length);
    finish(*t, status::success);
    return;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = &on_rendezvous_received;
  param.user_data = t;
  ucs_status_ptr_t req = ucp_am_recv_data_nbx(worker_->handle(), data, tail(*dst), length, &param);
  if (UCS_PTR_IS_ERR(req)) {
    finish(*t, from_ucs(UCS_PTR_STATUS(req)));
  } else if (req == nullptr) {
    dst->set_data(dst->data(), dst->data_length() + length);
    finish(*t, status::success);
  } else {
    t->ucx_request_ = req;
    ++rendezvous_in_flight_;
  }
}

void context::on_ack_op(const wire_header& h) {
  task* t = find_op(h.id);
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
    default:
      break;
  }
  if (ok(result) && result_buffer != nullptr) {
    std::memcpy(tail(*result_buffer), &h.operand0, sizeof(uint64_t));
    result_buffer->set_data(result_buffer->data(), result_buffer->data_length() + sizeof(uint64_t));
  }
  finish(*t, result);
}

// ---------------------------------------------------------------------------------------------
// Progress, deadlines, failure.

void context::fail_all(status result) noexcept {
  for (auto* list : {&posted_, &arrived_, &sends_, &ops_})
    while (!list->empty()) finish(*list->front(), result);
  ack_pending_ = false;
}

size_t context::poll() {
  size_t done = 0;
  if (peer_error_ != 0 && failure_ == status::success) {
    failure_ = from_ucs(peer_error_);
    if (peer_left_) {
      ZC_SDK_LOG_INFO("rdma: peer stopped; failing {} tasks in flight", inflight());
    } else {
      ZC_SDK_LOG_ERROR("rdma: connection to peer lost ({}); failing {} tasks in flight",
                       ucs_status_string(static_cast<ucs_status_t>(peer_error_)), inflight());
    }
    fail_all(failure_);
    close_endpoint(false);
    if (state() == core::context_state::running || state() == core::context_state::starting)
      set_state(core::context_state::stopping);
    // Nothing was in flight: no completion will come to finish the stop, so finish it here.
    if (state() == core::context_state::stopping && inflight() == 0)
      set_state(core::context_state::idle);
    ++done;
  }
  if (watch_peer_ && ep_ != nullptr && peer_error_ == 0) {
    auto now = steady_clock::now();
    if (now >= next_liveness_check_) {
      next_liveness_check_ = now + liveness_period;
      if (!peer_process_.alive()) {
        peer_error_ = UCS_ERR_CONNECTION_RESET;
        ZC_SDK_LOG_ERROR("rdma: peer process {} has exited", peer_process_.pid);
        ++done;
      }
    }
  }
  if (sends_.empty() && ops_.empty()) return done;
  auto now = steady_clock::now();
  for (auto* list : {&sends_, &ops_}) {
    while (!list->empty() && list->front()->deadline_ <= now) {
      ZC_SDK_LOG_WARN("rdma: task timed out after {} ms", task_timeout_.count());
      finish(*list->front(), status::time_out);
      ++done;
    }
  }
  return done;
}

bool context::arm() {
  return peer_error_ == 0 || failure_ != status::success;
}

steady_clock::time_point context::next_deadline() const {
  auto deadline = steady_clock::time_point::max();
  if (watch_peer_ && ep_ != nullptr && peer_error_ == 0) deadline = next_liveness_check_;
  if (!sends_.empty()) deadline = std::min(deadline, sends_.front()->deadline_);
  if (!ops_.empty()) deadline = std::min(deadline, ops_.front()->deadline_);
  return deadline;
}

}  // namespace zc::rdma
