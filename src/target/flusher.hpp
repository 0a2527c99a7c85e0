// A worker's flusher: a thread for the worker's slow storage calls, so that none of them holds up
// the worker's reads and writes: target_storage::flush() for flush IOs (as long as the file
// system takes to sync), and deallocate() and allocation_map() for discard, write zeroes and
// allocation map IOs (a memset or hole punch of a large range, a search of a file of many
// extents). Flushes that arrive while a sync runs are answered together by the next one, which
// starts after they arrived and so covers every write completed before them; each other job is
// answered on its own, in the order of the requests.
// Thread rules: construct, request*() and destroy on the worker's thread; `done` runs on the
// flusher's own thread and must hand the results back (engine_thread::post) rather than touch the
// worker's state.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "core/status.hpp"
#include "target/storage.hpp"

namespace zc::target {

class target_flusher {
 public:
  // The tokens of the requests one job answered, and its result.
  using done_function = std::function<void(std::vector<uint32_t> tokens, status result)>;

  // `storage` must outlive the flusher.
  target_flusher(target_storage& storage, done_function done);
  // Answers what is queued (one more sync, the other jobs done), then joins the thread.
  ~target_flusher();
  target_flusher(const target_flusher&) = delete;
  target_flusher& operator=(const target_flusher&) = delete;

  // Queues one flush; `done` gets `token` back once a sync that started after this call ended.
  void request(uint32_t token);
  // Queues target_storage::deallocate(offset, length); `done` gets `token` and its result.
  void request_deallocate(uint32_t token, uint64_t offset, uint64_t length);
  // Queues target_storage::allocation_map(first_block, bitmap); `done` gets `token` and its
  // result. `bitmap` is written by the flusher's thread until then: the caller leaves it alone.
  void request_allocation_map(uint32_t token, uint64_t first_block, std::span<uint8_t> bitmap);

 private:
  struct job {
    enum class kind { flush, deallocate, allocation_map } what;
    uint32_t token;
    uint64_t offset = 0;  // bytes (deallocate) or the first block (allocation_map)
    uint64_t length = 0;
    std::span<uint8_t> bitmap{};
  };

  void queue(job j);
  void run();

  target_storage& storage_;
  done_function done_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<job> queued_;  // under mutex_
  bool stopping_ = false;    // under mutex_
  std::thread thread_;       // last: starts once everything above exists
};

}  // namespace zc::target
