// A worker's flusher: a thread that runs target_storage::flush() for the worker's flush IOs, so
// that a sync of the backing file (as long as the file system takes) never holds up the worker's
// reads and writes. Requests that arrive while a sync runs are answered together by the next one,
// which starts after they arrived and so covers every write completed before them.
// Thread rules: construct, request() and destroy on the worker's thread; `done` runs on the
// flusher's own thread and must hand the results back (engine_thread::post) rather than touch the
// worker's state.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/status.hpp"
#include "target/storage.hpp"

namespace zc::target {

class target_flusher {
 public:
  // The tokens of the requests one sync answered, and its result.
  using done_function = std::function<void(std::vector<uint32_t> tokens, status result)>;

  // `storage` must outlive the flusher.
  target_flusher(target_storage& storage, done_function done);
  // Answers what is queued (one more sync), then joins the thread.
  ~target_flusher();
  target_flusher(const target_flusher&) = delete;
  target_flusher& operator=(const target_flusher&) = delete;

  // Queues one flush; `done` gets `token` back once a sync that started after this call ended.
  void request(uint32_t token);

 private:
  void run();

  target_storage& storage_;
  done_function done_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<uint32_t> queued_;  // under mutex_
  bool stopping_ = false;         // under mutex_
  std::thread thread_;            // last: starts once everything above exists
};

}  // namespace zc::target
