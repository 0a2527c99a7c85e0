#include "rdma/internal/ucx_worker.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/log.hpp"
#include "core/status.hpp"
#include "rdma/context.hpp"

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

ucx_worker::ucx_worker(core::progress_engine& engine, const core::device& device)
    : engine_(engine) {
  // Without these, shared memory is silently dropped under peer error handling, and a dead peer
  // is noticed after 20 s (UCX_MEASURED.md §7). The first is a transport (UCT) setting that UCP's
  // config API does not take, so it goes through the environment.
  setenv("UCX_MM_ERROR_HANDLING", "y", 0);
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
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i] == nullptr) {
      slots_[i] = &ctx;
      nonce = ++nonces_[i];
      return i;
    }
  }
  slots_.push_back(&ctx);
  nonces_.push_back(1);
  nonce = 1;
  return static_cast<uint32_t>(slots_.size() - 1);
}

void ucx_worker::remove(uint32_t slot) noexcept {
  if (slot < slots_.size()) slots_[slot] = nullptr;
  // Acks of a removed context must not be flushed.
  for (auto& c : flush_)
    if (c != nullptr && c->worker_slot() == slot) c = nullptr;
}

reply* ucx_worker::new_reply() {
  // Grows only up to the peak number of replies in flight; steady state allocates nothing.
  if (free_replies_.empty()) {
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
}

size_t ucx_worker::send_queued() {
  size_t sent = 0;
  for (context* c : flush_)
    if (c != nullptr) c->flush_acks();
  flush_.clear();
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
  size_t done = 0;
  for (int i = 0; i < 64; ++i) {
    unsigned n = ucp_worker_progress(worker_);
    if (n == 0) break;
    done += n;
  }
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
  return s == UCS_OK;
}

ucs_status_t ucx_worker::on_message(void* arg, const void* header, size_t header_length, void* data,
                                    size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<ucx_worker*>(arg);
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  if (header_length < short_header_size) {
    ZC_SDK_LOG_WARN("rdma: dropped a message with a {}-byte header", header_length);
    return UCS_OK;
  }
  wire_header h{};
  std::memcpy(&h, header, std::min(header_length, sizeof(h)));
  if (header_length < header_size_for(h.code)) {
    ZC_SDK_LOG_WARN("rdma: dropped op {} with a short header ({} bytes)", static_cast<int>(h.code),
                    header_length);
    return UCS_OK;
  }
  if (h.dst_context >= self->slots_.size() || self->slots_[h.dst_context] == nullptr ||
      self->nonces_[h.dst_context] != h.dst_nonce) {
    ZC_SDK_LOG_DEBUG("rdma: dropped op {} for a context that is gone", static_cast<int>(h.code));
    return UCS_OK;
  }
  return static_cast<ucs_status_t>(
      self->slots_[h.dst_context]->on_message(h, data, length, rendezvous));
}

}  // namespace zc::rdma::internal
