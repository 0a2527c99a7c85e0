// zc::rdma::context, DOCA's doca_rdma: one side of a reliable connection to one peer context,
// carrying sends/receives (with immediates), reads, writes (with immediate), 64-bit atomics and
// remote sync event operations. Built on UCX active messages (DESIGN §3): the memory owner checks
// every remote access against its export table, and read/write/atomic tasks complete on the
// owner's acknowledgement, i.e. once the data is in place. Every task has a deadline; as for an RC
// queue pair whose retries ran out, a missed deadline, a dead peer (UCX peer error handling,
// keepalive, a watch on a same-host peer process) or a protocol violation fails the connection:
// every task in flight fails, the endpoint closes, and the context leaves running. A task returns
// to its owner only once UCX references nothing of it (header, source, destination).
//
//   zc::rdma::context ctx{engine, zc::core::device::open("auto")};
//   ctx.configure<zc::rdma::send_task>(32, on_sent, on_send_error);
//   ctx.start();                                  // -> starting
//   auto mine = ctx.export_connection();          // give to the peer out of band ...
//   ctx.connect(theirs);                          // ... and connect to its blob -> running
//
// Thread rules: the progress engine's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include "core/context.hpp"
#include "core/device.hpp"
#include "core/memory_map.hpp"
#include "core/task.hpp"
#include "rdma/internal/host_process.hpp"
#include "rdma/internal/wire.hpp"
#include "rdma/tasks.hpp"

typedef struct ucp_ep* ucp_ep_h;

namespace zc::rdma {

namespace internal {
class ucx_worker;
struct reply;
struct context_hooks;

// Intrusive FIFO of in-flight tasks; a task is in at most one list at a time.
class task_list {
 public:
  bool empty() const noexcept { return head_ == nullptr; }
  task* front() const noexcept { return head_; }
  void push_back(task& t) noexcept;
  void remove(task& t) noexcept;
  bool contains(const task& t) const noexcept { return t.list_ == this; }

 private:
  task* head_ = nullptr;
  task* tail_ = nullptr;
};
}  // namespace internal

inline constexpr std::chrono::milliseconds default_task_timeout{5000};
// The shortest task timeout, in ticks of the coarse clock: a deadline may be checked up to a tick
// late and is set a tick long (so never early), so a timeout of one or two ticks would mean
// little.
inline constexpr int min_task_timeout_ticks = 4;

class context final : public core::context {
 public:
  context(core::progress_engine& engine, const core::device& device);
  ~context() override;

  // What the peer may do to this side's exported memory through this connection (rdma_read,
  // rdma_write, rdma_atomic). Default: all three. Idle state only.
  void set_permissions(core::access permissions);
  core::access permissions() const noexcept { return permissions_; }
  // Bound on every task but posted receives; expiry fails the task with time_out and, since the
  // peer may still act on it, the connection with it. Deadlines are kept on the coarse clock
  // (core::coarse_now): a timeout shorter than min_task_timeout() (a few of its ticks, tens of
  // milliseconds at most) is refused with invalid_value. Idle state only.
  void set_task_timeout(std::chrono::milliseconds timeout);
  static std::chrono::milliseconds min_task_timeout() noexcept;
  // Whether a peer process on this host is watched through a pidfd (default on). Off, a dead
  // peer is found by UCX alone (peer errors, keepalive). Idle state only.
  void set_process_watch(bool on);

  // Enables a task type with its pool size and callbacks. Idle state only.
  template <typename T>
  void configure(uint32_t count, std::function<void(T&)> on_success,
                 std::function<void(T&)> on_error) {
    require_idle("configure tasks");
    std::get<core::task_pool<T>>(*pools_).configure(*this, count, std::move(on_success),
                                                    std::move(on_error));
  }

  // Connection details for the peer (framed blob). After start().
  std::vector<uint8_t> export_connection();
  // Connects to the peer's exported details and enters running. Throws status_error on a
  // malformed, foreign or self-inconsistent blob, before anything reaches UCX.
  void connect(std::span<const uint8_t> remote_blob);

  // Takes a task of type T from its pool (status::no_memory when empty, not_supported when the
  // type was not configured). Fill it through its setters, then submit it.
  template <typename T>
  status allocate(core::user_data user_data, T*& out) noexcept {
    auto& pool = std::get<core::task_pool<T>>(*pools_);
    out = nullptr;
    if (!pool.configured()) return status::not_supported;
    out = pool.allocate();
    if (out == nullptr) return status::no_memory;
    out->set_user_data(user_data);
    return status::success;
  }

  // Starts a task. On success its callback runs later inside progress(); on failure nothing was
  // sent and the task is still the caller's. status::again: UCX holds too many unsent messages
  // of this context (back-pressure); progress and submit again.
  status submit(receive_task& t) noexcept;
  status submit(send_task& t) noexcept;
  status submit(read_task& t) noexcept;
  status submit(write_task& t) noexcept;
  status submit(atomic_cmp_swp_task& t) noexcept;
  status submit(atomic_fetch_add_task& t) noexcept;
  status submit(sync_event_get_task& t) noexcept;
  status submit(sync_event_set_task& t) noexcept;
  status submit(sync_event_add_task& t) noexcept;

  // The failure that took the context out of running, if any.
  status failure() const noexcept { return failure_; }

  size_t poll() override;
  bool arm() override;
  int wait_fd() const override;
  void fd_ready() override { peer_fd_ready_ = true; }
  core::steady_clock::time_point next_deadline() const override;

 private:
  friend struct internal::context_hooks;

  using pools =
      std::tuple<core::task_pool<receive_task>, core::task_pool<send_task>,
                 core::task_pool<send_imm_task>, core::task_pool<read_task>,
                 core::task_pool<write_task>, core::task_pool<write_imm_task>,
                 core::task_pool<atomic_cmp_swp_task>, core::task_pool<atomic_fetch_add_task>,
                 core::task_pool<sync_event_get_task>, core::task_pool<sync_event_set_task>,
                 core::task_pool<sync_event_add_task>>;

  core::context_state on_start() override;
  void on_stop() override;
  void require_idle(const char* what) const;

  // Lifecycle (context.cpp).
  void close_endpoint(bool tell_peer) noexcept;
  void orphan_tasks() noexcept;

  // Requester side (requester.cpp): tasks out, replies in.
  status check_submittable(task& t) const noexcept;
  // Sends the task's header (as long as its op needs) and `data`; the owed ack rides along.
  status post(task& t, const void* data, size_t length) noexcept;
  status post_send(task& t, internal::task_kind kind, const core::buffer& src, uint16_t flags,
                   uint32_t immediate) noexcept;
  status post_remote(task& t, internal::task_kind kind, internal::op code,
                     const core::memory_map& remote_map, uint64_t remote_address, uint64_t length,
                     core::access needed, const void* data, uint16_t flags) noexcept;
  task* find_op(uint64_t id, internal::op reply) noexcept;
  // The full number of our send named by `wire` (its low 32 bits); false if we never sent it.
  bool widen_send_seq(uint32_t wire, uint64_t& out) const noexcept;
  void on_sends_acked(uint32_t up_to);
  void on_send_nacked(uint32_t seq, status why);
  int on_read_reply(const internal::wire_header& h, void* data, size_t length, bool rendezvous);
  void on_ack_op(const internal::wire_header& h);
  void send_done(task& t, int ucs_status) noexcept;

  // Owner side (owner.cpp): the peer's sends into posted receives, its reads, writes and atomics
  // on our exports.
  int on_send(const internal::wire_header& h, void* data, size_t length, bool rendezvous);
  int on_write(const internal::wire_header& h, void* data, size_t length, bool rendezvous);
  void on_read(const internal::wire_header& h);
  void on_atomic(const internal::wire_header& h);
  void write_landed(internal::reply* r, int ucs_status) noexcept;
  void deliver_ready() noexcept;
  status serving_state() const noexcept;

  // Protocol (protocol.cpp): dispatch of incoming messages, replies and acknowledgements.
  int on_message(const internal::wire_header& h, void* data, size_t length, bool rendezvous);
  // Queues a reply (its header as long as its op needs) to go out after this progress pass.
  void send_reply(internal::wire_header& h, const void* data, size_t length,
                  internal::reply* r = nullptr);
  void nack_send(uint64_t seq, status why);
  // Puts the owed acknowledgement, if any, into an outgoing header; true if it did.
  bool carry_ack(internal::wire_header& h) noexcept;
  // Sends the owed acknowledgement alone (the worker calls it at the end of the pass it fell due
  // in, after the callbacks that could have carried it).
  void flush_acks();
  void ack_op(const internal::wire_header& request, status result, uint64_t value);
  int receive_rendezvous(task& t, void* data, void* dst, size_t length) noexcept;
  void rendezvous_done(task& t, int ucs_status) noexcept;

  // Liveness and failure (liveness.cpp).
  void finish(task& t, status result) noexcept;
  void release_if_unreferenced(task& t) noexcept;
  void fail_all(status result) noexcept;
  // Safe anywhere, UCX callbacks included: the failure is applied by the next poll().
  void note_failure(status why) noexcept;
  void apply_failure() noexcept;
  void check_deadlines(core::steady_clock::time_point now) noexcept;
  // The deadline of a task that starts now.
  core::steady_clock::time_point new_deadline() const noexcept;
  static void on_endpoint_error(void* arg, ucp_ep_h ep, int status);

  std::shared_ptr<internal::ucx_worker> worker_;
  uint32_t slot_ = 0;
  uint32_t nonce_ = 0;
  uint32_t peer_slot_ = 0;
  uint32_t peer_nonce_ = 0;
  ucp_ep_h ep_ = nullptr;
  core::access permissions_ = core::rdma_all;
  std::chrono::milliseconds task_timeout_ = default_task_timeout;
  bool process_watch_enabled_ = true;
  // Heap-held: if UCX still references tasks when the context goes, they are left behind, never
  // freed under it (see ~context).
  std::unique_ptr<pools> pools_;

  internal::task_list posted_;   // receives waiting for a message
  internal::task_list arrived_;  // receives matched to a message, completed in arrival order
  internal::task_list sends_;    // sends waiting for their acknowledgement, in sequence order
  internal::task_list ops_;      // reads/writes/atomics waiting for their reply, oldest first
  internal::task_list parked_;   // decided, waiting for UCX to let go of them
  // The number of the first send of a connection: 1, or near 2^32 for a test of the widening
  // of 32-bit sequence numbers (context_hooks).
  uint64_t first_seq_ = 1;
  uint64_t next_send_seq_ = 1;
  uint64_t highest_acked_ = 0;      // the peer acknowledged every send up to this one
  uint64_t last_received_seq_ = 0;  // the peer's sends arrive with consecutive sequence numbers
  uint64_t ack_seq_ = 0;            // highest delivered send
  bool ack_pending_ = false;        // ack_seq_ has not gone out yet
  uint32_t unsent_ = 0;             // our messages UCX has not finished sending
  status pending_failure_ = status::success;  // noted, not yet applied (see note_failure)
  status failure_ = status::success;
  bool peer_left_ = false;  // the peer said it was stopping (not an error)
  internal::process_watch peer_process_;
  bool peer_fd_ready_ = false;  // the pidfd woke the engine: look at the process in poll()
  core::steady_clock::time_point next_liveness_check_{};
};

// Makes the contexts created from now on over `device` on `engine` use a new UCX worker; the
// contexts that exist keep theirs, which goes with the last of them. For a reconnect after a
// peer died: UCX's shared-memory transport gives each worker one FIFO that every sender writes
// into, and a sender killed between taking a slot and filling it leaves the FIFO stuck behind that
// slot for good (ARCHITECTURE, known limits), so nothing sent to the old worker may ever arrive.
// Thread rules: the engine's thread, as for contexts.
void renew_transport(core::progress_engine& engine, const core::device& device);

}  // namespace zc::rdma
