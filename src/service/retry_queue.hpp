// A worker's queue of submissions a peer could not take yet (a comch send with no posted buffer,
// an rdma send UCX answered `again` to): keys (slot indices), oldest first, retried from the
// engine in order so that nothing overtakes what already waits. Sized at construction for every
// key that can wait at once, so the data path neither allocates nor drops.
// Thread rules: the worker's engine thread only (a plain value).
//
//   retry_queue q(2 * transactions);
//   if (!q.empty() || submit(k) == status::again) q.push(k);   // FIFO
//   while (!q.empty() && submit(q.front()) != status::again) q.pop();
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zc::service {

class retry_queue {
 public:
  explicit retry_queue(size_t capacity) : keys_(capacity) {}

  bool empty() const noexcept { return count_ == 0; }
  size_t size() const noexcept { return count_; }
  size_t capacity() const noexcept { return keys_.size(); }
  // False (nothing queued) when full: a caller's sizing bug, never an overwrite.
  bool push(uint32_t key) noexcept {
    if (count_ == keys_.size()) return false;
    keys_[(head_ + count_) % keys_.size()] = key;
    ++count_;
    return true;
  }
  // The oldest key; the queue must not be empty.
  uint32_t front() const noexcept { return keys_[head_]; }
  void pop() noexcept {
    if (count_ == 0) return;
    head_ = (head_ + 1) % keys_.size();
    --count_;
  }

 private:
  std::vector<uint32_t> keys_;
  size_t head_ = 0;
  size_t count_ = 0;
};

}  // namespace zc::service
