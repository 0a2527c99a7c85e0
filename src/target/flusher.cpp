#include "target/flusher.hpp"

#include <utility>

namespace zc::target {

target_flusher::target_flusher(target_storage& storage, done_function done)
    : storage_(storage), done_(std::move(done)), thread_([this] { run(); }) {}

target_flusher::~target_flusher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void target_flusher::request(uint32_t token) {
  {
    std::lock_guard lock(mutex_);
    queued_.push_back(token);
  }
  wake_.notify_one();
}

void target_flusher::run() {
  for (;;) {
    std::vector<uint32_t> batch;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
      if (queued_.empty()) return;  // stopping, nothing left to answer
      batch.swap(queued_);
    }
    // Taken before the sync starts: every request in the batch came before it.
    const status result = storage_.flush();
    done_(std::move(batch), result);
  }
}

}  // namespace zc::target
