// rdma::context lifecycle: construction, configuration, connection, stop and destruction. The
// data path lives in requester.cpp (our tasks), owner.cpp (the peer's requests), protocol.cpp
// (message dispatch and replies) and liveness.cpp (deadlines, peer death, failure).
#include "rdma/context.hpp"

#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include "core/log.hpp"
#include "rdma/internal/connection_blob.hpp"
#include "rdma/internal/context_hooks.hpp"
#include "rdma/internal/ucx_worker.hpp"

namespace zc::rdma {

using core::steady_clock;

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
// How long a stop waits for the disconnect notice and the endpoint close to go out.
constexpr auto goodbye_timeout = std::chrono::milliseconds(200);
constexpr auto close_timeout = std::chrono::milliseconds(500);
// How long a destroyed context lets UCX finish with its tasks before leaving them behind.
constexpr auto release_timeout = std::chrono::seconds(2);
}  // namespace

context::context(core::progress_engine& engine, const core::device& device)
    : core::context(engine),
      worker_(internal::ucx_worker::for_engine(engine, device)),
      pools_(std::make_unique<pools>()) {
  slot_ = worker_->add(*this, nonce_);
}

context::~context() {
  fail_all(status::shutdown);
  close_endpoint(failure_ == status::success);
  // UCX may still read a task's header or source, or write into its buffer: a force-closed
  // endpoint completes those requests, within a bound. Whatever UCX still holds after it is left
  // behind (never freed under UCX) rather than freed: see orphan_tasks().
  auto give_up = steady_clock::now() + release_timeout;
  while (!parked_.empty() && steady_clock::now() < give_up) ucp_worker_progress(worker_->handle());
  if (!parked_.empty()) orphan_tasks();
  worker_->remove(slot_);
}

void context::orphan_tasks() noexcept {
  auto* home = new internal::orphanage{};
  for (task* t = parked_.front(); t != nullptr; t = t->next_in_list_) {
    t->orphanage_ = home;
    ++home->held;
  }
  ZC_SDK_LOG_ERROR(
      "rdma: UCX still references {} tasks of a destroyed context; their memory is kept until "
      "UCX lets go of the last of them",
      home->held);
  // The pools outlive this context: their completions still queued are dropped now, while the
  // engine is known, and they are detached, so that freeing them touches neither.
  std::apply([this](auto&... pool) { ((engine().forget(pool), pool.detach()), ...); }, *pools_);
  home->pools = std::shared_ptr<pools>(std::move(pools_));
}

void context::require_idle(const char* what) const {
  if (state() != core::context_state::idle)
    throw status_error(status::bad_state,
                       std::string("rdma context: ") + what + " is only allowed while idle");
}

void context::set_permissions(core::access permissions) {
  require_idle("set_permissions");
  permissions_ = permissions;
}

void context::set_task_timeout(std::chrono::milliseconds timeout) {
  require_idle("set_task_timeout");
  const auto least = min_task_timeout();
  if (timeout < least)
    throw status_error(
        status::invalid_value,
        fmt::format("rdma context: a task timeout of {} ms is shorter than {} ms, {} ticks of the "
                    "coarse clock that deadlines are kept on",
                    timeout.count(), least.count(), min_task_timeout_ticks));
  task_timeout_ = timeout;
}

std::chrono::milliseconds context::min_task_timeout() noexcept {
  return std::chrono::ceil<std::chrono::milliseconds>(min_task_timeout_ticks *
                                                      core::coarse_resolution());
}

void context::set_process_watch(bool on) {
  require_idle("set_process_watch");
  process_watch_enabled_ = on;
}

core::context_state context::on_start() {
  failure_ = status::success;
  pending_failure_ = status::success;
  peer_left_ = false;
  next_send_seq_ = first_seq_;
  highest_acked_ = first_seq_ - 1;
  last_received_seq_ = first_seq_ - 1;
  ack_seq_ = first_seq_ - 1;
  ack_pending_ = false;
  // A new connection is a new identity: late traffic for the old one is dropped by the worker.
  nonce_ = worker_->renew_nonce(slot_);
  return core::context_state::starting;
}

void context::on_stop() {
  fail_all(status::shutdown);
  close_endpoint(failure_ == status::success);
}

std::vector<uint8_t> context::export_connection() {
  if (state() != core::context_state::starting)
    throw status_error(status::bad_state, "rdma context: export_connection needs start() first");
  internal::connection_info me;
  me.slot = slot_;
  me.nonce = nonce_;
  me.process = internal::host_process::self();
  me.worker_address = worker_->address();
  return internal::encode_connection(me);
}

void context::connect(std::span<const uint8_t> remote_blob) {
  if (state() != core::context_state::starting)
    throw status_error(status::bad_state, "rdma context: connect needs start() first");
  if (ep_ != nullptr) throw status_error(status::already_exist, "rdma context already connected");
  internal::connection_info peer;
  const status decoded = internal::decode_connection(remote_blob, peer);
  if (decoded == status::unsupported_version) {
    // The frame's version (FORMATS §5) is the peer's protocol version.
    const unsigned theirs = unsigned(remote_blob[4]) << 8 | remote_blob[5];
    throw status_error(decoded, fmt::format("rdma context: the peer speaks rdma protocol version "
                                            "{} and this build speaks {}; both sides must run "
                                            "the same protocol version",
                                            theirs, internal::protocol_version));
  }
  throw_if_failed(decoded, "malformed RDMA connection blob");

  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(peer.worker_address.data());
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
  peer_slot_ = peer.slot;
  peer_nonce_ = peer.nonce;
  worker_->bind(slot_, peer_nonce_);
  // Another process on this host: watch it directly (a peer in this process dies with us).
  peer_process_.close();
  next_liveness_check_ = steady_clock::now();
  if (process_watch_enabled_ && internal::host_process::self().can_watch(peer.process) &&
      !peer_process_.open(peer.process)) {
    ZC_SDK_LOG_WARN("rdma: peer process {} cannot be watched; relying on UCX keepalive",
                    peer.process.pid);
  }
  set_state(core::context_state::running);
}

void context::close_endpoint(bool tell_peer) noexcept {
  peer_process_.close();
  if (ep_ == nullptr) {
    ack_pending_ = false;
    return;
  }
  internal::wire_header goodbye{};
  if (tell_peer) {
    // A stop: what was decided goes out before the goodbye (a refusal the goodbye's
    // acknowledgement would otherwise overtake), and the acknowledgement still owed rides on
    // the goodbye, so the peer's send of a message we took completes with success, not with
    // connection_reset.
    worker_->send_replies();
    goodbye.dst_context = peer_slot_;
    goodbye.dst_nonce = peer_nonce_;
    goodbye.src_nonce = nonce_;
    goodbye.code = internal::op::disconnect;
    carry_ack(goodbye);
  }
  ack_pending_ = false;  // a failed connection acknowledges nothing more
  // From here on nothing of ours may be sent on this endpoint: replies queued for it, or queued by
  // callbacks that UCX runs while it closes, are dropped unsent.
  ucp_ep_h ep = ep_;
  ep_ = nullptr;
  worker_->bind(slot_, 0);
  worker_->forget_endpoint(ep);
  if (tell_peer) worker_->say_goodbye(ep, goodbye, goodbye_timeout);
  // Force: pending sends are purged (their callbacks run with an error), so nothing of ours goes
  // out after this point.
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &param);
  if (UCS_PTR_IS_PTR(req)) {
    auto give_up = steady_clock::now() + close_timeout;
    while (ucp_request_check_status(req) == UCS_INPROGRESS && steady_clock::now() < give_up)
      ucp_worker_progress(worker_->handle());
    // Freeing an unfinished close request is allowed: UCX releases it when the close ends.
    ucp_request_free(req);
  }
  worker_->forget_endpoint(ep);
}

void renew_transport(core::progress_engine& engine, const core::device& device) {
  internal::ucx_worker::renew_for_engine(engine, device);
}

}  // namespace zc::rdma
