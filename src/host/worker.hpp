// The host side of one worker of a storage session: a thread pinned to its core with its progress
// engine, a comch producer that sends IO messages to the service's consumer paired with this
// worker, and a comch consumer whose posted buffers take the service's responses. An IO is a
// transaction slot: submit() sends its message; the completion callback runs once both the send
// and the response (matched by user_data) have completed, or the IO failed.
//
//   host::worker w(index, cpu, mode, connection, {.slots = 64, .on_complete = done});
//   w.pair(service_consumer_id);
//   w.thread().post([q = w.queue()] { q->submit(0, {.type = read, .io_size = 4096, ...}); });
//
// Thread rules: the worker's public methods are for the control thread; an io_queue and its
// callbacks belong to the worker's engine thread (reach it through thread().call/post).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "comch/connection.hpp"
#include "comch/consumer.hpp"
#include "comch/producer.hpp"
#include "core/buffer.hpp"
#include "core/engine_owned.hpp"
#include "core/engine_thread.hpp"
#include "core/memory_map.hpp"
#include "storage/io_message.hpp"

namespace zc::host {

// One IO as the caller describes it; user_data is the library's (slot and generation).
struct io_request {
  storage::io_message_type type = storage::io_message_type::read;
  uint32_t io_size = 0;
  uint64_t requester_offset = 0;  // in the session's IO region
  uint64_t storage_offset = 0;
};

// The IO deadline a host program derives from its --control-timeout: twice it, because a gga
// service may spend one control timeout finding a target silent before it serves the IO degraded
// from the other two.
inline std::chrono::milliseconds io_timeout_for(std::chrono::milliseconds control_timeout) {
  return 2 * control_timeout;
}

struct queue_options {
  uint32_t slots = 64;  // IOs in flight at most; the consumer posts twice as many buffers
  // An IO with no response by then makes the queue give up on the service (failure() is
  // time_out, nothing more is accepted); the IOs the service has complete only with its answer or
  // once the connection is gone, never while a transfer into their memory may still happen.
  std::chrono::milliseconds io_timeout{10000};
  // Runs on the engine thread when slot `slot` is done: success, the service's or target's
  // result, or this side's failure (time_out, connection_reset, unexpected for a malformed
  // response).
  std::function<void(uint32_t slot, status result)> on_complete;
};

// The engine-thread half of a worker.
class io_queue final : public core::event_source {
 public:
  io_queue(core::progress_engine& engine, comch::connection& connection, queue_options options);
  ~io_queue() override;
  io_queue(const io_queue&) = delete;
  io_queue& operator=(const io_queue&) = delete;

  // Replaces the completion callback (the owner of the IOs may be built after the queue).
  void set_on_complete(std::function<void(uint32_t, status)> f) {
    options_.on_complete = std::move(f);
  }
  // The service consumer this worker sends to.
  void set_peer(uint32_t consumer_id) noexcept {
    peer_ = consumer_id;
    has_peer_ = true;
  }
  uint32_t consumer_id() const noexcept { return consumer_->id(); }
  // Both comch endpoints running and a peer set.
  bool ready() const noexcept;

  // Sends the IO on `slot`. Errors: invalid_value (no such slot, or io_size 0 for a read or
  // write), in_use (the slot is busy), bad_state (not ready, or the queue failed), or the
  // producer's own failure. `again` is never returned: a send that finds no posted buffer on the
  // service side is retried from the engine.
  status submit(uint32_t slot, const io_request& request) noexcept;
  uint32_t slots() const noexcept { return static_cast<uint32_t>(slots_.size()); }
  uint32_t in_flight() const noexcept { return in_flight_; }
  // Why the queue stopped working (the connection went away, the consumer failed); success while
  // it works. Every IO in flight then completed with it.
  status failure() const noexcept { return failure_; }
  // Responses that matched no IO in flight (late, duplicated or forged), and malformed ones.
  uint64_t stray_responses() const noexcept { return stray_; }

  // Stops both comch endpoints; in-flight IOs complete with shutdown. Stopping our endpoints does
  // not stop a live service: once the queue gave up on it (failure() is time_out), the memory of
  // the IOs it had may still be written until it is gone, so a caller ends the session and its
  // IO region rather than reuse that memory (the initiator and zcstore_nbd end the program).
  void stop() noexcept;
  bool stopped() const noexcept;

  // event_source: retries sends that found no buffer, and fails IOs past their deadline.
  size_t poll() override;
  core::steady_clock::time_point next_deadline() const override;

 private:
  struct slot {
    core::buffer* message = nullptr;
    comch::producer_send_task* send = nullptr;
    uint32_t generation = 0;
    bool busy = false;      // submitted, not yet handed back
    bool sent = false;      // the send completed (or failed)
    bool answered = false;  // a response arrived, or the IO failed
    status result = status::success;
    io_request request;
    core::steady_clock::time_point deadline{};
  };

  void on_sent(comch::producer_send_task& t, bool ok);
  void on_response(comch::consumer_post_recv_task& t);
  void on_receive_failed(comch::consumer_post_recv_task& t);
  void repost(comch::consumer_post_recv_task& t) noexcept;
  void answer(slot& s, status result) noexcept;
  void finish_if_done(uint32_t index) noexcept;
  void give_up(status why) noexcept;
  void fail_all(status why) noexcept;
  status push(uint32_t index) noexcept;

  core::progress_engine& engine_;
  queue_options options_;
  uint32_t peer_ = 0;
  bool has_peer_ = false;
  uint32_t in_flight_ = 0;
  status failure_ = status::success;
  uint64_t stray_ = 0;
  bool stopping_ = false;
  std::vector<slot> slots_;
  std::vector<uint32_t> backlog_;  // slots whose send got `again`, oldest first (capacity: slots)
  size_t backlog_head_ = 0;
  size_t backlog_count_ = 0;
  core::steady_clock::time_point next_check_ = core::steady_clock::time_point::max();
  std::unique_ptr<core::memory_map> requests_map_;
  std::unique_ptr<core::memory_map> responses_map_;  // PCI-exportable: the service writes here
  core::buffer_inventory inventory_;
  std::vector<comch::consumer_post_recv_task*> receives_;
  // Declared last, destroyed first: nothing they hold may outlive the buffers.
  std::unique_ptr<comch::producer> producer_;
  std::unique_ptr<comch::consumer> consumer_;
};

// The control thread's handle on a worker: its thread and the io_queue living there.
class worker {
 public:
  // Builds the io_queue on a new thread pinned to `cpu` and starts its consumer, so that its id
  // is allocated now: build workers one after another, in index order (the pairing rule,
  // docs/ARCHITECTURE.md). Throws status_error (time_out when the thread did not answer within
  // `limit`).
  worker(uint32_t index, uint32_t cpu, core::poll_mode mode, comch::connection& connection,
         queue_options options, std::chrono::milliseconds limit);
  ~worker();
  worker(const worker&) = delete;
  worker& operator=(const worker&) = delete;

  uint32_t index() const noexcept { return index_; }
  uint32_t cpu() const noexcept { return cpu_; }
  uint32_t consumer_id() const noexcept { return consumer_id_; }
  // Sets the service consumer this worker sends to.
  void pair(uint32_t service_consumer_id);
  bool ready();
  // Stops the comch endpoints and waits (bounded) until they are idle.
  void stop();

  core::engine_thread& thread() noexcept { return thread_; }
  io_queue* queue() const noexcept { return queue_.get(); }

 private:
  uint32_t index_;
  uint32_t cpu_;
  uint32_t consumer_id_ = 0;
  std::chrono::milliseconds limit_;
  core::engine_thread thread_;
  core::engine_owned<io_queue> queue_;  // after thread_: destroyed first, on the thread
};

}  // namespace zc::host
