// A hostile rdma peer for tests: raw UCX, no zcstore context. A victim context connects to its
// blob like to any peer; the test then sends it hand-made protocol messages (forged replies,
// sequence gaps, acks of nothing) and reads what the victim answers. Waits are bounded and sleep
// on the UCX worker's event fd.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <vector>

#include "rdma/internal/connection_blob.hpp"
#include "rdma/internal/wire.hpp"

namespace zc::rdma::testing {

class evil_peer {
 public:
  struct message {
    internal::wire_header header;
    std::vector<uint8_t> payload;
  };

  explicit evil_peer(const std::string& transport) {
    ucp_config_t* config = nullptr;
    EXPECT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
    ucp_config_modify(config, "TLS", transport == "tcp" ? "tcp" : "sm,self");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    EXPECT_EQ(ucp_init(&params, config, &context_), UCS_OK);
    ucp_config_release(config);
    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    EXPECT_EQ(ucp_worker_create(context_, &wparams, &worker_), UCS_OK);
    EXPECT_EQ(ucp_worker_get_efd(worker_, &efd_), UCS_OK);
    ucp_address_t* address = nullptr;
    size_t length = 0;
    EXPECT_EQ(ucp_worker_get_address(worker_, &address, &length), UCS_OK);
    address_.assign(reinterpret_cast<uint8_t*>(address),
                    reinterpret_cast<uint8_t*>(address) + length);
    ucp_worker_release_address(worker_, address);
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                         UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    handler.id = internal::am_id;
    handler.cb = &evil_peer::on_message;
    handler.arg = this;
    handler.flags = UCP_AM_FLAG_WHOLE_MSG;
    EXPECT_EQ(ucp_worker_set_am_recv_handler(worker_, &handler), UCS_OK);
  }

  ~evil_peer() {
    if (ep_ != nullptr) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t req = ucp_ep_close_nbx(ep_, &param);
      if (UCS_PTR_IS_PTR(req)) {
        progress_until([&] { return ucp_request_check_status(req) != UCS_INPROGRESS; },
                       std::chrono::milliseconds(500));
        ucp_request_free(req);
      }
    }
    for (auto* r : rendezvous_) ucp_am_data_release(worker_, r);
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }

  // The blob a victim connects to: our worker, and a slot/nonce the victim will put in headers.
  std::vector<uint8_t> blob() const {
    internal::connection_info me;
    me.slot = 7;
    me.nonce = own_nonce;
    me.worker_address = address_;
    // No process identity a victim could watch: it relies on UCX alone, as for a remote peer.
    me.process.host_id = 1;
    me.process.pid = 1;
    return internal::encode_connection(me);
  }

  // Connects back to the victim's blob; its messages then carry the victim's slot and nonce.
  void connect(std::span<const uint8_t> victim_blob) {
    internal::connection_info victim;
    ASSERT_EQ(internal::decode_connection(victim_blob, victim), status::success);
    victim_slot_ = victim.slot;
    victim_nonce_ = victim.nonce;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    params.address = reinterpret_cast<const ucp_address_t*>(victim.worker_address.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ASSERT_EQ(ucp_ep_create(worker_, &params, &ep_), UCS_OK);
  }

  // A header addressed to the victim. `id` goes where the op keeps its number: a send's or a
  // nack's sequence number, the send an ack_sends acknowledges, else the task id.
  internal::wire_header header(internal::op code, uint64_t id) const {
    internal::wire_header h{};
    h.dst_context = victim_slot_;
    h.dst_nonce = victim_nonce_;
    h.src_nonce = own_nonce;
    h.code = code;
    switch (code) {
      case internal::op::send:
      case internal::op::nack_send:
        h.seq = static_cast<uint32_t>(id);
        break;
      case internal::op::ack_sends:
        h.flags = internal::has_ack;
        h.acked = static_cast<uint32_t>(id);
        break;
      default:
        h.id = id;
    }
    return h;
  }

  // Sends one message and waits (bounded) until UCX has sent it; false if it did not finish.
  bool send(const internal::wire_header& h, std::span<const uint8_t> payload = {},
            std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    return send_prefix(h, internal::header_size_for(h.code), payload, timeout);
  }
  // The same with only the first `header_length` bytes of the header (a short or long header).
  bool send_prefix(const internal::wire_header& h, size_t header_length,
                   std::span<const uint8_t> payload = {},
                   std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    ucp_request_param_t param{};
    header_ = h;
    ucs_status_ptr_t req = ucp_am_send_nbx(ep_, internal::am_id, &header_, header_length,
                                           payload.data(), payload.size(), &param);
    if (UCS_PTR_IS_ERR(req)) return false;
    if (req == nullptr) return true;
    bool done =
        progress_until([&] { return ucp_request_check_status(req) != UCS_INPROGRESS; }, timeout);
    if (done) ucp_request_free(req);
    // Not done: the request stays UCX's (header_ is a member and outlives it); the test fails.
    return done;
  }

  // Waits (bounded) for the next message from the victim.
  bool receive(message& out, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    if (!progress_until([&] { return !inbox_.empty(); }, timeout)) return false;
    out = std::move(inbox_.front());
    inbox_.pop_front();
    return true;
  }
  // Waits (bounded) for the next message with this op, dropping others (acks) on the way.
  bool receive(internal::op code, message& out,
               std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (!receive(out, left)) return false;
      if (out.header.code == code) return true;
    }
    return false;
  }

  // Progress for a while, sleeping on the worker's fd between events.
  void idle(std::chrono::milliseconds how_long) {
    progress_until([] { return false; }, how_long);
  }

 private:
  template <typename Done>
  bool progress_until(Done done, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      while (ucp_worker_progress(worker_) != 0) {
      }
      if (done()) return true;
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
      pollfd p{efd_, POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      poll(&p, 1, static_cast<int>(std::min<long long>(left + 1, 50)));
    }
  }

  static ucs_status_t on_message(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param) {
    auto* self = static_cast<evil_peer*>(arg);
    message m;
    std::memset(&m.header, 0, sizeof(m.header));
    std::memcpy(&m.header, header, std::min(header_length, sizeof(m.header)));
    if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) {
      // Keep the descriptor (never fetched): the sender's payload stays pinned until released.
      self->rendezvous_.push_back(data);
      self->inbox_.push_back(std::move(m));
      return UCS_INPROGRESS;
    }
    m.payload.assign(static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + length);
    self->inbox_.push_back(std::move(m));
    return UCS_OK;
  }

  static constexpr uint32_t own_nonce = 0x5EED;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
  int efd_ = -1;
  std::vector<uint8_t> address_;
  uint32_t victim_slot_ = 0;
  uint32_t victim_nonce_ = 0;
  internal::wire_header header_{};
  std::deque<message> inbox_;
  std::vector<void*> rendezvous_;
};

}  // namespace zc::rdma::testing
