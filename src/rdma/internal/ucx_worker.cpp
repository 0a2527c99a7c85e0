#include "rdma/internal/ucx_worker.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/log.hpp"
#include "core/random.hpp"
#include "core/status.hpp"
#include "rdma/context.hpp"
#include "rdma/internal/context_hooks.hpp"
#include "rdma/internal/ucs_status.hpp"

namespace zc::rdma::internal {
namespace {

void check(ucs_status_t s, const char* what) {
  if (s != UCS_OK)
    throw status_error(status::driver, fmt::format("{}: {}", what, ucs_status_string(s)));
}

// The engine keys its shared objects by address: one stable address per device spec.
const void* key_for(const core::device& device) {
  static std::mutex mutex;
  static std::map<std::string, int> keys;
  std::lock_guard lock(mutex);
  return &keys[device.spec()];
}

// Sets a UCX option unless the user set it in the environment.
void set_default(ucp_config_t* config, const char* name, const char* value) {
  if (std::getenv((std::string("UCX_") + name).c_str()) != nullptr) return;
  ucp_config_modify(config, name, value);
}

// UCX reads this setting from the environment (UCP's config API does not take it). Set once,
// before main() and so before any engine thread reads the environment: a setenv() racing another
// thread's getenv() is undefined behaviour.
const bool mm_error_handling_set = [] {
  setenv("UCX_MM_ERROR_HANDLING", "y", 0);
  return true;
}();

// Replies (acks, read data) out at once on one worker: bounds what a peer flooding us with
// requests can make us hold (each may pin an export claim until UCX has sent it).
constexpr size_t max_replies = 16384;

void on_write_landed(void* request, ucs_status_t s, size_t, void* user_data) {
  auto* r = static_cast<reply*>(user_data);
  ucp_request_free(request);
  if (context* owner = r->worker->find(r->owner_slot, r->owner_nonce)) {
    context_hooks::write_landed(*owner, r, s);
  } else {
    r->worker->release(r);
  }
}

void on_goodbye_sent(void* request, ucs_status_t, void* user_data) {
  auto* r = static_cast<reply*>(user_data);
  r->ep = nullptr;  // recycled by the worker's next pass
  ucp_request_free(request);
}

void on_reply_sent(void* request, ucs_status_t status, void* user_data) {
  auto* r = static_cast<reply*>(user_data);
  if (status != UCS_OK && status != UCS_ERR_CANCELED)
    ZC_SDK_LOG_DEBUG("rdma reply not sent: {}", ucs_status_string(status));
  // The worker recycles it on its next pass; a null ep marks it done.
  r->claim.reset();
  r->ep = nullptr;
  ucp_request_free(request);
}

}  // namespace

std::shared_ptr<ucx_worker> ucx_worker::for_engine(core::progress_engine& engine,
                                                   const core::device& device) {
  return engine.shared<ucx_worker>(key_for(device),
                                   [&] { return std::make_shared<ucx_worker>(engine, device); });
}

void ucx_worker::renew_for_engine(core::progress_engine& engine, const core::device& device) {
  engine.forget_shared(key_for(device));
}

ucx_worker::ucx_worker(core::progress_engine& engine, const core::device& device)
    : engine_(engine) {
  // Without these, shared memory is silently dropped under peer error handling, and a dead peer
  // is noticed after 20 s (UCX_MEASURED.md §7). The first is set before main() (above).
  (void)mm_error_handling_set;
  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  set_default(config, "KEEPALIVE_INTERVAL", "1s");
  switch (device.kind()) {
    case core::device::transport::tcp:
      ucp_config_modify(config, "TLS", "tcp");
      break;
    case core::device::transport::shared_memory:
      ucp_config_modify(config, "TLS", "sm,self");
      break;
    case core::device::transport::any:
      break;
  }
  if (!device.net_device().empty())
    ucp_config_modify(config, "NET_DEVICES", device.net_device().c_str());

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  ucs_status_t s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  check(s, "ucp_init");

  ucp_worker_params_t wparams{};
  wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
  s = ucp_worker_create(context_, &wparams, &worker_);
  if (s != UCS_OK) {
    ucp_cleanup(context_);
    check(s, "ucp_worker_create");
  }
  check(ucp_worker_get_efd(worker_, &efd_), "ucp_worker_get_efd");

  ucp_address_t* address = nullptr;
  size_t address_length = 0;
  check(ucp_worker_get_address(worker_, &address, &address_length), "ucp_worker_get_address");
  auto* bytes = reinterpret_cast<const uint8_t*>(address);
  address_.assign(bytes, bytes + address_length);
  ucp_worker_release_address(worker_, address);

  ucp_am_handler_param_t handler{};
  handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                       UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  handler.id = am_id;
  handler.cb = &ucx_worker::on_message;
  handler.arg = this;
  handler.flags = UCP_AM_FLAG_WHOLE_MSG;
  check(ucp_worker_set_am_recv_handler(worker_, &handler), "ucp_worker_set_am_recv_handler");
  engine_.attach(*this);
}

ucx_worker::~ucx_worker() {
  engine_.detach(*this);
  // Let replies in flight and wire-up messages to peers that have gone finish or fail before the
  // worker goes: UCX 1.13 asserts when ucp_worker_destroy() purges a wire-up reply still pending
  // on a failed TCP endpoint. Progress until it has been idle a while, within a bound.
  auto give_up = core::steady_clock::now() + std::chrono::milliseconds(500);
  int idle_passes = 0;
  while (idle_passes < 20 && core::steady_clock::now() < give_up) {
    if (ucp_worker_progress(worker_) != 0) {
      idle_passes = 0;
    } else {
      ++idle_passes;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
}

uint32_t ucx_worker::add(context& ctx, uint32_t& nonce) {
  nonce = core::random_nonzero_u32();
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i] == nullptr) {
      slots_[i] = &ctx;
      nonces_[i] = nonce;
      peer_nonces_[i] = 0;
      return i;
    }
  }
  slots_.push_back(&ctx);
  nonces_.push_back(nonce);
  peer_nonces_.push_back(0);
  return static_cast<uint32_t>(slots_.size() - 1);
}

uint32_t ucx_worker::renew_nonce(uint32_t slot) {
  uint32_t nonce = core::random_nonzero_u32();
  while (nonce == nonces_[slot]) nonce = core::random_nonzero_u32();
  nonces_[slot] = nonce;
  return nonce;
}

void ucx_worker::remove(uint32_t slot) noexcept {
  if (slot >= slots_.size()) return;
  // Acks of a removed context must not be flushed.
  for (auto& c : flush_)
    if (c == slots_[slot]) c = nullptr;
  slots_[slot] = nullptr;
  nonces_[slot] = 0;  // never a valid nonce: late traffic for the slot is dropped
  peer_nonces_[slot] = 0;
}

void ucx_worker::bind(uint32_t slot, uint32_t peer_nonce) noexcept {
  if (slot < peer_nonces_.size()) peer_nonces_[slot] = peer_nonce;
}

void ucx_worker::forget_endpoint(ucp_ep_h ep) noexcept {
  for (reply* r = queue_head_; r != nullptr; r = r->next)
    if (r->ep == ep) r->ep = nullptr;  // released, unsent, by send_queued()
}

reply* ucx_worker::new_reply() {
  // Grows only up to the peak number of replies in flight; steady state allocates nothing.
  if (free_replies_.empty()) {
    if (replies_.size() >= max_replies) return nullptr;
    replies_.push_back(std::make_unique<reply>());
    return replies_.back().get();
  }
  reply* r = free_replies_.back();
  free_replies_.pop_back();
  return r;
}

void ucx_worker::release(reply* r) noexcept {
  r->claim.reset();
  r->ep = nullptr;
  r->data = nullptr;
  r->length = 0;
  r->next = nullptr;
  free_replies_.push_back(r);
}

void ucx_worker::queue(reply* r) noexcept {
  r->next = nullptr;
  if (queue_tail_ != nullptr) {
    queue_tail_->next = r;
  } else {
    queue_head_ = r;
  }
  queue_tail_ = r;
}

void ucx_worker::want_flush(context& ctx) {
  flush_.push_back(&ctx);
  if (!pass_end_asked_) {
    pass_end_asked_ = true;
    engine_.call_at_pass_end(*this);
  }
}

size_t ucx_worker::pass_end() {
  pass_end_asked_ = false;
  return flush_owed_acks();
}

size_t ucx_worker::flush_owed_acks() {
  if (flush_.empty()) return 0;
  for (context* c : flush_)
    if (c != nullptr) context_hooks::flush_acks(*c);
  flush_.clear();
  return send_queued();
}

size_t ucx_worker::send_queued() {
  size_t sent = 0;
  while (queue_head_ != nullptr) {
    reply* r = queue_head_;
    queue_head_ = r->next;
    if (queue_head_ == nullptr) queue_tail_ = nullptr;
    r->next = nullptr;
    ++sent;
    if (r->ep == nullptr) {
      release(r);
      continue;
    }
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = &on_reply_sent;
    param.user_data = r;
    ucs_status_ptr_t req =
        ucp_am_send_nbx(r->ep, am_id, &r->header, r->header_length, r->data, r->length, &param);
    if (req == nullptr || UCS_PTR_IS_ERR(req)) {
      if (UCS_PTR_IS_ERR(req))
        ZC_SDK_LOG_DEBUG("rdma reply not sent: {}", ucs_status_string(UCS_PTR_STATUS(req)));
      release(r);
    } else {
      in_flight_replies_.push_back(r);
    }
  }
  return sent;
}

size_t ucx_worker::poll() {
  // Acknowledgements that fell due outside a pass (UCX progressed by a closing context) and
  // that nothing carried; those of a pass go at its end (pass_end).
  size_t done = flush_owed_acks();
  for (int i = 0; i < 64; ++i) {
    unsigned n = ucp_worker_progress(worker_);
    if (n == 0) break;
    done += n;
  }
  if (done != 0) busy_arms_ = 0;
  // Recycle replies whose sends have completed.
  for (size_t i = 0; i < in_flight_replies_.size();) {
    reply* r = in_flight_replies_[i];
    if (r->ep == nullptr) {
      release(r);
      in_flight_replies_[i] = in_flight_replies_.back();
      in_flight_replies_.pop_back();
    } else {
      ++i;
    }
  }
  done += send_queued();
  return done;
}

bool ucx_worker::arm() {
  if (queue_head_ != nullptr || !flush_.empty()) return false;
  ucs_status_t s = ucp_worker_arm(worker_);
  if (s == UCS_ERR_BUSY) {
    // Busy is mostly the wake-up signal of an arrival that the pass before already took: arming
    // consumes it, and UCX cannot tell whether it was taken. Look once more here and arm again
    // when that finds nothing, instead of a whole engine pass (every source polled) for nothing.
    if (ucp_worker_progress(worker_) != 0) {
      busy_arms_ = 0;
      return false;  // callbacks ran: the engine passes again before it sleeps
    }
    // A callback that UCX does not count may still have queued a reply or owed an ack.
    if (queue_head_ != nullptr || !flush_.empty()) return false;
    s = ucp_worker_arm(worker_);
  }
  if (s != UCS_ERR_BUSY) {
    busy_arms_ = 0;
    return s == UCS_OK;
  }
  // Busy with nothing to progress: an arrival (or its signal) between the two looks, or our
  // sends wait for room in a shared-memory peer's FIFO, which only that peer's progress makes
  // and which wakes nobody. The engine has to poll, but that peer may share our core (the
  // service and the target do): spinning would keep it off the core for a whole time slice, so
  // each round trip would cost milliseconds. The second time in a row, hand it the core.
  if (++busy_arms_ > 1) sched_yield();
  return false;
}

void ucx_worker::receive_write(reply* r, void* data, void* dst, size_t length) noexcept {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.recv_am = &on_write_landed;
  param.user_data = r;
  ucs_status_ptr_t req = ucp_am_recv_data_nbx(worker_, data, dst, length, &param);
  // A failed receive has still started: UCX keeps the descriptor until it is released, and only
  // then lets the sender go.
  if (UCS_PTR_IS_ERR(req)) ucp_am_data_release(worker_, data);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) {
    context* owner = find(r->owner_slot, r->owner_nonce);
    ucs_status_t s = req == nullptr ? UCS_OK : UCS_PTR_STATUS(req);
    if (owner != nullptr) {
      context_hooks::write_landed(*owner, r, s);
    } else {
      release(r);
    }
  }
}

void ucx_worker::say_goodbye(ucp_ep_h ep, const wire_header& goodbye,
                             std::chrono::milliseconds timeout) noexcept {
  // The header lives in a worker-owned record until UCX is done with it, whatever the wait.
  reply* r = new_reply();
  if (r == nullptr) return;
  r->header = goodbye;
  r->ep = ep;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = &on_goodbye_sent;
  param.user_data = r;
  ucs_status_ptr_t req =
      ucp_am_send_nbx(ep, am_id, &r->header, header_size_for(op::disconnect), nullptr, 0, &param);
  if (req == nullptr || UCS_PTR_IS_ERR(req)) {
    release(r);
    return;
  }
  in_flight_replies_.push_back(r);
  auto give_up = core::steady_clock::now() + timeout;
  while (r->ep != nullptr && core::steady_clock::now() < give_up) ucp_worker_progress(worker_);
}

ucs_status_t ucx_worker::on_message(void* arg, const void* header, size_t header_length, void* data,
                                    size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<ucx_worker*>(arg);
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  wire_header h;
  if (!ok(decode_header(header, header_length, h))) {
    ZC_SDK_LOG_WARN("rdma: dropped a malformed message ({}-byte header)", header_length);
    return UCS_OK;
  }
  context* target = self->find(h.dst_context, h.dst_nonce);
  if (target == nullptr) {
    ZC_SDK_LOG_DEBUG("rdma: dropped op {} for a context that is gone", static_cast<int>(h.code));
    return UCS_OK;
  }
  // Only the peer this context connected to may address it: the message must also name the
  // peer's own nonce, which a process holding just our connection blob does not know.
  // (UCP_AM_SEND_FLAG_REPLY would let UCX name the sending endpoint instead, but it costs about
  // 3x on shared memory, measured in BENCHMARKS.md.)
  if (self->peer_nonces_[h.dst_context] == 0 || h.src_nonce != self->peer_nonces_[h.dst_context]) {
    // Warned once: a sender must not be able to flood the log.
    if (!self->warned_foreign_) {
      self->warned_foreign_ = true;
      ZC_SDK_LOG_WARN("rdma: dropped op {} for context {} from a sender that is not its peer",
                      static_cast<int>(h.code), h.dst_context);
    }
    return UCS_OK;
  }
  return static_cast<ucs_status_t>(context_hooks::on_message(*target, h, data, length, rendezvous));
}

}  // namespace zc::rdma::internal
