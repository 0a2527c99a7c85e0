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
  queue({job::kind::flush, token});
}

void target_flusher::request_deallocate(uint32_t token, uint64_t offset, uint64_t length) {
  queue({job::kind::deallocate, token, offset, length});
}

void target_flusher::request_allocation_map(uint32_t token, uint64_t first_block,
                                            std::span<uint8_t> bitmap) {
  queue({job::kind::allocation_map, token, first_block, bitmap.size(), bitmap});
}

void target_flusher::queue(job j) {
  {
    std::lock_guard lock(mutex_);
    queued_.push_back(j);
  }
  wake_.notify_one();
}

void target_flusher::run() {
  for (;;) {
    std::vector<job> batch;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
      if (queued_.empty()) return;  // stopping, nothing left to answer
      batch.swap(queued_);
    }
    std::vector<uint32_t> flushes;
    for (const job& j : batch) {
      switch (j.what) {
        case job::kind::flush:
          flushes.push_back(j.token);
          break;
        case job::kind::deallocate:
          done_({j.token}, storage_.deallocate(j.offset, j.length));
          break;
        case job::kind::allocation_map:
          done_({j.token}, storage_.allocation_map(j.offset, j.bitmap));
          break;
      }
    }
    // Every flush of the batch was requested before this sync starts, so one covers them all;
    // so does it the deallocations just done.
    if (!flushes.empty()) {
      const status result = storage_.flush();
      done_(std::move(flushes), result);
    }
  }
}

}  // namespace zc::target
