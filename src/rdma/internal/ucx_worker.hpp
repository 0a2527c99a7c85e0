// One UCX context + worker per (progress engine, device): every rdma::context on that engine
// shares it. It decodes incoming active messages and routes each to the context it names (slot +
// random nonce) only if it came through that context's own endpoint, so a process holding one
// connection blob cannot reach another connection. Replies (acks, read data) go out after
// ucp_worker_progress() returns rather than from inside UCX callbacks.
// Thread rules: the progress engine's thread only.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/device.hpp"
#include "core/export_table.hpp"
#include "core/progress_engine.hpp"
#include "rdma/internal/wire.hpp"

namespace zc::rdma {
class context;
class task;
}  // namespace zc::rdma

namespace zc::rdma::internal {

class ucx_worker;

// A reply waiting to go out or in flight: UCX reads its header until the send completes, and the
// claim keeps an exported region alive while its bytes are being sent or received.
struct reply {
  wire_header header{};
  size_t header_length = 0;
  ucp_ep_h ep = nullptr;
  const void* data = nullptr;
  size_t length = 0;
  core::export_table::claim claim;
  reply* next = nullptr;
  // For a rendezvous write landing in an exported region: who to tell when it has landed.
  ucx_worker* worker = nullptr;
  uint32_t owner_slot = 0;
  uint32_t owner_nonce = 0;
  rdma::task* receive = nullptr;    // write with immediate: the receive it completes
  uint32_t receive_generation = 0;  // ... in that use of it
};

class ucx_worker final : public core::event_source {
 public:
  static std::shared_ptr<ucx_worker> for_engine(core::progress_engine& engine,
                                                const core::device& device);
  // The next for_engine() makes a new worker (rdma::renew_transport).
  static void renew_for_engine(core::progress_engine& engine, const core::device& device);
  ucx_worker(core::progress_engine& engine, const core::device& device);
  ~ucx_worker() override;

  ucp_worker_h handle() const noexcept { return worker_; }
  const std::vector<uint8_t>& address() const noexcept { return address_; }

  // Slots name contexts in message headers; a random nonce tells a slot's successive owners (and
  // connections) apart and is not guessable from outside.
  uint32_t add(context& ctx, uint32_t& nonce);
  uint32_t renew_nonce(uint32_t slot);
  void remove(uint32_t slot) noexcept;
  // The peer a context is connected to (its nonce; 0: none, nothing accepted). A message is
  // delivered only if it names the context (slot + nonce) AND its sender (src_nonce): a process
  // holding one connection blob knows only one of the two nonces.
  void bind(uint32_t slot, uint32_t peer_nonce) noexcept;
  // Drops queued replies on an endpoint that is being closed (never sent on a closed handle).
  void forget_endpoint(ucp_ep_h ep) noexcept;
  // The context in `slot` if it is still the one with `nonce`.
  context* find(uint32_t slot, uint32_t nonce) const noexcept {
    return slot < slots_.size() && nonces_[slot] == nonce ? slots_[slot] : nullptr;
  }

  // nullptr when max_replies are out (a peer flooding us with requests).
  reply* new_reply();
  void release(reply* r) noexcept;
  // Sends after the current progress pass, in queue order (acks stay behind earlier nacks).
  void queue(reply* r) noexcept;
  // True while replies of this pass wait to be sent.
  bool replies_queued() const noexcept { return queue_head_ != nullptr; }
  // A context owes its peer an acknowledgement. The completion callbacks of this pass may still
  // send something that carries it; what is still owed at the end of the pass (pass_end) goes
  // out alone, so an acknowledgement never waits for another progress() call.
  void want_flush(context& ctx);
  // Sends the queued replies now rather than after the pass (a context about to close its
  // endpoint lets what it decided go first).
  size_t send_replies() { return send_queued(); }
  // Receives a rendezvous write into an export; `r` (with its claim) lives until UCX is done,
  // then its context, if still there, is told.
  void receive_write(reply* r, void* data, void* dst, size_t length) noexcept;
  // Sends `goodbye` (a disconnect, with the acknowledgement still owed) to a peer context,
  // waiting at most `timeout` for it to leave.
  void say_goodbye(ucp_ep_h ep, const wire_header& goodbye,
                   std::chrono::milliseconds timeout) noexcept;

  size_t poll() override;
  size_t pass_end() override;
  int wait_fd() const override { return efd_; }
  bool arm() override;

 private:
  static ucs_status_t on_message(void* arg, const void* header, size_t header_length, void* data,
                                 size_t length, const ucp_am_recv_param_t* param);
  size_t send_queued();
  size_t flush_owed_acks();

  core::progress_engine& engine_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  // ucp_worker_arm() answers busy for arrivals not yet progressed and, on shared memory, for
  // sends that wait for room in a peer's FIFO: those have no wake-up, only polling moves them.
  // How many arms in a row said busy with no UCX progress in between (see arm()).
  uint32_t busy_arms_ = 0;
  std::vector<uint8_t> address_;
  std::vector<context*> slots_;
  std::vector<uint32_t> nonces_;
  std::vector<uint32_t> peer_nonces_;  // per slot: the connected peer's nonce, 0 when none
  bool warned_foreign_ = false;
  std::vector<std::unique_ptr<reply>> replies_;
  std::vector<reply*> free_replies_;
  std::vector<reply*> in_flight_replies_;
  reply* queue_head_ = nullptr;
  reply* queue_tail_ = nullptr;
  std::vector<context*> flush_;
  bool pass_end_asked_ = false;  // flush_ is flushed at the end of this pass
};

}  // namespace zc::rdma::internal
