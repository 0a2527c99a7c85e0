// zc::comch::consumer, DOCA's doca_comch_consumer: the receiving end of the fast path. It posts
// receive buffers from one memory map with PCI read-write access (memory_map::allocate), which
// the peer process maps, so a producer's send is one copy straight into a posted buffer. When it
// starts, the peer gets a consumer-new event with its id(); when it stops, a consumer-expired one.
//
//   zc::comch::consumer rx(worker_engine, *conn, {.buffers = map.get(), .post_recv_tasks = 64,
//                                                  .on_recv = [](auto& t) { use(t.buf()); }});
//   rx.start();
//   auto* t = rx.allocate_post_recv(*buf);
//   rx.submit(*t);   // completes when a producer has written into buf
//
// Thread rules: any one thread, with its own progress engine (not necessarily the connection's);
// nothing on the receive path takes a lock or makes a system call, except the doorbell read after
// the engine slept. Destroy it idle.
#pragma once

#include <memory>
#include <vector>

#include "comch/connection.hpp"
#include "comch/internal/shared_segment.hpp"
#include "core/buffer.hpp"
#include "core/context.hpp"
#include "core/memory_map.hpp"
#include "core/task.hpp"

namespace zc::comch {

namespace internal {
struct queue_header;
struct queue_slot;
}  // namespace internal

// A receive buffer offered to the peer's producers. Data lands after the buffer's data section
// (DOCA appends at the tail); on success the data section has grown by the message length.
class consumer_post_recv_task final : public core::task_base {
 public:
  core::buffer& buf() const noexcept { return *buffer_; }
  // For re-posting with another buffer.
  void set_buffer(core::buffer& b) noexcept { buffer_ = &b; }
  // Bytes the last successful completion delivered.
  uint64_t received_length() const noexcept { return received_; }

 private:
  friend class consumer;
  core::buffer* buffer_ = nullptr;
  uint64_t received_ = 0;
};

inline constexpr uint32_t default_post_recv_tasks = 64;

struct consumer_config {
  // Receive memory: allocate()d with access::pci_read_write. Must outlive the consumer.
  core::memory_map* buffers = nullptr;
  // Receive tasks; also the depth of the shared queue (rounded up to a power of two).
  uint32_t post_recv_tasks = default_post_recv_tasks;
  core::task_pool<consumer_post_recv_task>::callback on_recv;
  core::task_pool<consumer_post_recv_task>::callback on_recv_error;
};

class consumer final : public core::context {
 public:
  // Throws status_error: bad_config (no memory map, no tasks), not_permitted (the map lacks
  // pci_read_write), not_supported (the map cannot be exported: not from allocate()).
  consumer(core::progress_engine& engine, connection& conn, consumer_config config);
  ~consumer() override;

  // Unique on its connection; assigned by start() and announced to the peer.
  uint32_t id() const noexcept { return id_; }
  // A receive task for `buf`, or nullptr when all are in flight.
  consumer_post_recv_task* allocate_post_recv(core::buffer& buf) noexcept;
  // Posts the buffer. Errors: bad_state (not running), not_permitted (its memory map lacks PCI
  // read-write access), invalid_value (no buffer, or a buffer outside this consumer's map).
  // A peer that writes a lie into the queue (a fill longer than the buffer, a head no producer
  // could have left) fails that receive and then the consumer: it stops, and every task in flight
  // completes with invalid_value. Our buffer descriptors never move outside their buffers.
  status submit(consumer_post_recv_task& task) noexcept;

  size_t poll() override;
  int wait_fd() const override { return data_bell_; }
  bool arm() override;
  void fd_ready() override { bell_rang_ = true; }

 protected:
  // Throws status_error(not_connected) when the connection is gone.
  core::context_state on_start() override;
  // Revokes every buffer no producer has claimed (nothing is written into them afterwards) and
  // fails those at once, and tells the peer the consumer expired. A buffer a producer has claimed
  // may still be being written: it completes once filled, or fails once the peer is gone (its
  // connection closed, or it lied), never earlier. So the consumer stays stopping until then.
  void on_stop() override;

 private:
  enum class fill { pending, delivered, lie };
  // Closes the queue to producers and revokes unclaimed buffers; returns the first revoked
  // position (every one before it was claimed).
  uint64_t revoke() noexcept;
  // Rings the space doorbell if a producer starved while we posted.
  void wake_starved_producers() noexcept;
  fill deliver(uint64_t position) noexcept;
  // Stopping: completes claimed positions as they fill, all of them once the peer is gone.
  size_t settle_claims() noexcept;
  void distrust_peer(const char* lie) noexcept;

  std::shared_ptr<internal::link> link_;
  consumer_config config_;
  int data_bell_ = -1;   // producers ring it when we sleep; the link rings it when it closes
  int space_bell_ = -1;  // we ring it for producers waiting for buffers
  uint32_t slot_count_ = 0;
  internal::shared_segment queue_;  // a new one per start: the last may still be in flight
  internal::queue_header* header_ = nullptr;
  internal::queue_slot* slots_ = nullptr;
  uint64_t mask_ = 0;
  uint64_t tail_ = 0;         // next position to post
  uint64_t done_ = 0;         // next position to complete
  uint64_t claimed_end_ = 0;  // stopping: [done_, claimed_end_) were claimed before revocation
  uint64_t checked_ = 0;      // tail_ when we last looked for starved producers
  std::vector<consumer_post_recv_task*> posted_;  // by position & mask_
  uint32_t id_ = 0;
  bool armed_ = false;
  bool bell_rang_ = false;  // the doorbell woke the engine: poll() drains it
  bool waker_added_ = false;
  bool peer_lied_ = false;  // what the queue says about claims and fills is no longer believed
  status stop_reason_ = status::shutdown;
  core::task_pool<consumer_post_recv_task> pool_;
};

}  // namespace zc::comch
