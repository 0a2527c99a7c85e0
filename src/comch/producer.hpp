// zc::comch::producer, DOCA's doca_comch_producer: the sending end of the fast path. A send task
// copies a buffer's data section straight into the next buffer that the target consumer (named by
// the id from a consumer-new event) has posted, in the peer's memory: one copy, no staging. The
// task completes, inside progress(), once the bytes are there and the consumer has been told.
// Order is FIFO per producer->consumer pair.
//
//   zc::comch::producer tx(worker_engine, *conn, {.send_tasks = 64, .on_send_done = ...});
//   tx.start();
//   auto* t = tx.allocate_send(*buf, consumer_id);
//   while (tx.submit(*t) == zc::status::again) worker_engine.progress();  // no posted buffer yet
//
// Thread rules: any one thread, with its own progress engine; many producers may send to one
// consumer. The send path takes no lock and makes no system call, except ringing the consumer's
// doorbell when it sleeps. Destroy it idle.
#pragma once

#include <memory>
#include <vector>

#include "comch/connection.hpp"
#include "core/buffer.hpp"
#include "core/context.hpp"
#include "core/task.hpp"

namespace zc::comch {

namespace internal {
class remote_consumer;
}

class producer_send_task final : public core::task_base {
 public:
  core::buffer& buf() const noexcept { return *buffer_; }
  uint32_t consumer_id() const noexcept { return consumer_id_; }
  // For re-submission with another buffer or target.
  void set(core::buffer& b, uint32_t consumer_id) noexcept {
    buffer_ = &b;
    consumer_id_ = consumer_id;
  }

 private:
  friend class producer;
  core::buffer* buffer_ = nullptr;
  uint32_t consumer_id_ = 0;
};

inline constexpr uint32_t default_producer_send_tasks = 64;

struct producer_config {
  uint32_t send_tasks = default_producer_send_tasks;
  core::task_pool<producer_send_task>::callback on_send_done;
  core::task_pool<producer_send_task>::callback on_send_error;
};

class producer final : public core::context {
 public:
  // Throws status_error(bad_config) for zero tasks.
  producer(core::progress_engine& engine, connection& conn, producer_config config);
  ~producer() override;

  // A send task, or nullptr when all are in flight.
  producer_send_task* allocate_send(core::buffer& buf, uint32_t consumer_id) noexcept;
  // Sends the buffer's data section. Errors, with the task not submitted: bad_state (not
  // running), invalid_value (no buffer), not_found (no such consumer, or it expired), again (the
  // consumer has no free posted buffer: progress and retry; in event mode the engine is woken
  // when it posts one). A message longer than the posted buffer is accepted and then fails with
  // too_big, nothing written. A posted buffer outside the consumer's memory is a lie of the peer:
  // the send fails with invalid_value, nothing written, and later sends to that consumer (from
  // any producer on the connection) get not_found.
  status submit(producer_send_task& task) noexcept;

  size_t poll() override;
  int wait_fd() const override { return epoll_; }
  bool arm() override;
  void fd_ready() override { bell_rang_ = true; }

 protected:
  // Throws status_error(not_connected) when the connection is gone.
  core::context_state on_start() override;
  void on_stop() override;

 private:
  struct known_consumer {
    uint32_t id = 0;
    std::shared_ptr<internal::remote_consumer> consumer;
    bool watched = false;  // its space doorbell is in our epoll set
    uint64_t posted = 0;   // the consumer's `posted` as we last read it
  };
  known_consumer* lookup(uint32_t id) noexcept;
  void forget(size_t index) noexcept;
  void starve(internal::remote_consumer& rc) noexcept;

  std::shared_ptr<internal::link> link_;
  producer_config config_;
  int epoll_ = -1;  // wake_, plus the space doorbells of consumers we wait for (edge-triggered)
  int wake_ = -1;   // rung by the link when the connection closes
  std::vector<known_consumer> known_;
  size_t last_ = 0;  // index in known_ of the last consumer sent to
  std::vector<internal::remote_consumer*> starved_;
  bool bell_rang_ = false;  // a doorbell woke the engine: poll() empties the set and drains wake_
  bool waker_added_ = false;
  core::task_pool<producer_send_task> pool_;
};

}  // namespace zc::comch
