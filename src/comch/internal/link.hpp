// What a connection shares with the producers and consumers created on it, which may run on other
// threads with their own progress engines: whether the connection is still up, frames they want
// the connection's thread to send (consumer announcements), the peer's consumers as imported
// here, and the doorbells to ring when the connection goes away.
// Thread rules: every member is safe from any thread; the mutex is taken on the control path only
// (start, stop, first send to a consumer id), never per message.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "comch/internal/frame.hpp"
#include "comch/internal/queue.hpp"
#include "comch/internal/shared_segment.hpp"
#include "core/memory_map.hpp"
#include "core/status.hpp"

namespace zc::comch::internal {

// A frame a fast-path endpoint asks the connection's thread to send. Owns its descriptors.
struct outbox_frame {
  frame_type type = frame_type::message;
  std::vector<uint8_t> payload;
  std::vector<int> fds;
};

// A consumer of the peer process, as producers here see it: its queue and receive memory mapped
// into this process, and its doorbells. Immutable after attach() but for `expired`.
class remote_consumer {
 public:
  // Maps and checks what a consumer_new frame announced; takes ownership of the three
  // descriptors whether it succeeds or throws. Throws status_error (invalid_value: a queue that
  // does not match its announcement; not_permitted: receive memory without PCI write access).
  static std::shared_ptr<remote_consumer> attach(uint32_t id, uint32_t slot_count, int queue_fd,
                                                 std::shared_ptr<core::memory_map> buffers,
                                                 int data_bell, int space_bell);
  ~remote_consumer();
  remote_consumer(const remote_consumer&) = delete;
  remote_consumer& operator=(const remote_consumer&) = delete;

  uint32_t id() const noexcept { return id_; }
  queue_header& header() const noexcept { return *header_; }
  queue_slot& slot(uint64_t position) const noexcept { return slots_[position & mask_]; }
  uint64_t slot_mask() const noexcept { return mask_; }
  uint8_t* buffers() const noexcept { return buffer_base_; }
  uint64_t buffers_size() const noexcept { return buffer_size_; }
  int data_bell() const noexcept { return data_bell_; }
  int space_bell() const noexcept { return space_bell_; }

  // Set by the connection's thread when the peer says the consumer is gone or the link closes.
  std::atomic<bool> expired{false};
  // Set by a producer that caught the queue in a lie (a buffer outside the consumer's memory):
  // no producer here sends to it again.
  std::atomic<bool> lied{false};

 private:
  remote_consumer() = default;
  uint32_t id_ = 0;
  shared_segment queue_;
  std::shared_ptr<core::memory_map> buffer_map_;
  queue_header* header_ = nullptr;
  queue_slot* slots_ = nullptr;
  uint64_t mask_ = 0;
  uint8_t* buffer_base_ = nullptr;
  uint64_t buffer_size_ = 0;
  int data_bell_ = -1;
  int space_bell_ = -1;
};

class link {
 public:
  // `mailbox` is the doorbell the owning server/client watches; the link keeps its own dup.
  explicit link(int mailbox);
  ~link();
  link(const link&) = delete;
  link& operator=(const link&) = delete;

  bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }
  // Consumer ids are unique per connection and never reused.
  uint32_t next_consumer_id() noexcept { return next_consumer_id_.fetch_add(1); }

  // --- fast-path side ---
  // Queues a frame for the connection's thread and wakes it; not_connected once closed (the
  // frame's descriptors are closed then).
  status post(outbox_frame frame);
  // Doorbells rung when the link closes (a consumer's data doorbell, a producer's wake-up).
  void add_waker(int fd);
  void remove_waker(int fd) noexcept;
  // A live peer consumer by id, or null.
  std::shared_ptr<remote_consumer> find(uint32_t id);

  // --- connection side ---
  std::vector<outbox_frame> take_outbox();
  // Only the connection's thread adds, so a find() just before tells whether this succeeds.
  void add_remote(std::shared_ptr<remote_consumer> consumer);
  size_t remote_count();
  // Marks a peer consumer expired and forgets it; false if the id was unknown.
  bool expire_remote(uint32_t id);
  // The receive memory a consumer_new frame names, imported once per distinct export.
  std::shared_ptr<core::memory_map> import_buffers(std::span<const uint8_t> blob);
  // Closes the link: expires every peer consumer (their ids are returned, in creation order),
  // drops the outbox, rings every waker. Idempotent (later calls return nothing).
  std::vector<uint32_t> close();

 private:
  std::atomic<bool> closed_{false};
  std::atomic<uint32_t> next_consumer_id_{1};
  int mailbox_ = -1;
  std::mutex mutex_;
  std::vector<outbox_frame> outbox_;
  std::vector<int> wakers_;
  std::map<uint32_t, std::shared_ptr<remote_consumer>> remotes_;
  std::map<std::vector<uint8_t>, std::weak_ptr<core::memory_map>> imported_buffers_;
};

}  // namespace zc::comch::internal
