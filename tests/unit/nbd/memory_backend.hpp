// A storage backend in memory, for the server's tests only: a fixed number of ios (one slot each),
// each with its own buffer of max_io bytes (one segment, or segments of `segment` bytes, as
// host_backend cuts its slices), completed at once (on submit) but handed back through the same
// eventfd-signalled path as the real one, in order or shuffled. Optional: a limit on the bytes all
// ios hold at once (memory() is then that limit, as host_backend's block-granular memory),
// completions held until the test lets them go, and faults (every IO at one offset fails).
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "nbd/backend.hpp"

namespace zc::nbd::test {

class memory_backend final : public backend {
 public:
  memory_backend(uint64_t size, uint32_t block, uint32_t max_io, uint32_t ios,
                 bool read_only = false, uint32_t segment = 0)
      : data_(size),
        block_(block),
        max_io_(max_io),
        segment_(segment == 0 ? max_io : segment),
        read_only_(read_only),
        ios_(ios) {
    fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    for (auto& s : ios_) {
      s.memory.resize(max_io_);
      free_.push_back(&s);
    }
  }
  ~memory_backend() override { ::close(fd_); }

  uint64_t size() const noexcept override { return data_.size(); }
  uint32_t block_size() const noexcept override { return block_; }
  uint32_t max_io() const noexcept override { return max_io_; }
  uint64_t memory() const noexcept override {
    return limit_ != 0 ? limit_ : uint64_t(max_io_) * ios_.size();
  }
  uint32_t slots() const noexcept override { return static_cast<uint32_t>(ios_.size()); }
  uint32_t slots_for(uint32_t) const noexcept override { return 1; }
  bool read_only() const noexcept override { return read_only_; }

  io* acquire(uint32_t length) noexcept override {
    if (free_.empty() || length > max_io_ || held_ + length > memory() || length > largest_)
      return nullptr;
    slot* s = free_.back();
    free_.pop_back();
    held_ += length;
    peak_ios_ = std::max(peak_ios_, ios_.size() - free_.size());
    s->x = io{};
    s->x.length = length;
    s->vecs.clear();
    for (uint32_t at = 0; at < length; at += segment_)
      s->vecs.push_back({s->memory.data() + at, std::min(segment_, length - at)});
    s->x.segments = s->vecs;
    return &s->x;
  }

  void submit(io& x) noexcept override {
    x.result = status::success;
    const bool ranged = x.kind == io_kind::discard || x.kind == io_kind::zero_range;
    const uint64_t bytes = ranged ? x.extent : x.length;
    if (fail_offset_ && x.kind != io_kind::flush && *fail_offset_ >= x.offset &&
        *fail_offset_ < x.offset + bytes) {
      x.result = status::io_failed;
    } else if ((ranged || x.kind == io_kind::allocation_map) && !sparse_) {
      x.result = status::invalid_value;  // as a target that does not know the type
    } else if (x.kind == io_kind::write_zeroes || ranged) {
      std::memset(data_.data() + x.offset, 0, bytes);
      mark(x.offset, bytes, x.kind == io_kind::write_zeroes);
      ++(x.kind == io_kind::write_zeroes ? zeroes
         : x.kind == io_kind::discard    ? discards
                                         : zeroings);
    } else if (x.kind == io_kind::allocation_map) {
      ++maps;
      for (uint64_t i = 0; i < uint64_t(x.length) * 8; ++i) {
        const uint64_t b = x.offset / block_ + i;
        const bool set = b < allocated_.size() && allocated_[b];
        auto* byte = static_cast<uint8_t*>(x.segments[0].iov_base) + i / 8;  // one segment
        *byte = static_cast<uint8_t>(set ? *byte | (1u << (i % 8)) : *byte & ~(1u << (i % 8)));
      }
    } else if (x.kind == io_kind::read || x.kind == io_kind::write) {
      uint64_t at = x.offset;
      for (const iovec& v : x.segments) {
        if (x.kind == io_kind::read)
          std::memcpy(v.iov_base, data_.data() + at, v.iov_len);
        else
          std::memcpy(data_.data() + at, v.iov_base, v.iov_len);
        at += v.iov_len;
      }
      (x.kind == io_kind::read ? bytes_read : bytes_written) += x.length;
      if (x.kind == io_kind::write) mark(x.offset, x.length, true);
    } else {
      ++flushes;
    }
    std::lock_guard lock(mutex_);
    if (hold_) {
      held_ios_.push_back(&x);
      return;
    }
    // Shuffled: among the completions not yet taken, this one goes anywhere.
    const size_t at = shuffle_ ? static_cast<size_t>(rng_() % (done_.size() + 1)) : done_.size();
    done_.insert(done_.begin() + static_cast<ptrdiff_t>(at), &x);
    if (same_thread_) return;  // the server looks at has_completions() after its pass
    const uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
  }

  void release(io& x) noexcept override {
    held_ -= x.length;
    free_.push_back(reinterpret_cast<slot*>(&x));
  }

  int completion_fd() const noexcept override { return same_thread_ ? -1 : fd_; }
  bool has_completions() const noexcept override { return same_thread_ && !done_.empty(); }
  void take_completions(std::vector<io*>& out) override {
    uint64_t v;
    (void)!::read(fd_, &v, sizeof v);
    std::lock_guard lock(mutex_);
    out.insert(out.end(), done_.begin(), done_.end());
    done_.clear();
  }

  std::vector<uint8_t>& bytes() { return data_; }
  size_t free_ios() const { return free_.size(); }
  // The most ios held at once so far (server thread, or after it stopped).
  size_t peak_ios() const { return peak_ios_; }
  // Before the server starts: all ios together hold at most `bytes`.
  void limit_memory(uint64_t bytes) { limit_ = bytes; }
  // Before the server starts: completions taken together come back in a random order (seeded).
  void shuffle_completions(uint32_t seed) {
    shuffle_ = true;
    rng_.seed(seed);
  }
  // Before the server starts: no io over `bytes` is given, however much memory is free (as
  // memory in pieces too small for it).
  void fragment(uint32_t bytes) { largest_ = bytes; }
  // Before the server starts: completions are announced by has_completions(), not by an fd, as
  // by a backend on the server's own thread (host_backend run to completion). Not with holding.
  void complete_on_server_thread() { same_thread_ = true; }
  // Before the server starts: ios complete only when let_go() says so.
  void hold_completions() { hold_ = true; }
  // From any thread: completes the n ios submitted first among those held. Returns how many.
  size_t let_go(size_t n) {
    std::lock_guard lock(mutex_);
    size_t k = 0;
    for (; k < n && !held_ios_.empty(); ++k) {
      done_.push_back(held_ios_.front());
      held_ios_.pop_front();
    }
    const uint64_t one = 1;
    if (k != 0) (void)!::write(fd_, &one, sizeof one);
    return k;
  }
  // From any thread: how many ios are held (submitted, not let go).
  size_t held() {
    std::lock_guard lock(mutex_);
    return held_ios_.size();
  }
  // From any thread: every io held completes, and those submitted later at once.
  void stop_holding() {
    {
      std::lock_guard lock(mutex_);
      hold_ = false;
    }
    let_go(SIZE_MAX);
  }
  // Before the server starts: discard, zero_range and allocation_map answered invalid_value, as
  // by storage that does not know them.
  void without_sparse() { sparse_ = false; }
  // Before the server starts: blocks first..first+count-1 hold data (others read as zeros).
  void set_allocated(uint64_t first, uint64_t count) { mark(first * block_, count * block_, true); }
  // Counted on the server's thread; read once it stopped.
  uint64_t zeroes = 0;    // write_zeroes ios (zeros written as data)
  uint64_t discards = 0;  // discard ios
  uint64_t zeroings = 0;  // zero_range ios
  uint64_t maps = 0;      // allocation_map ios
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  void fail_at(std::optional<uint64_t> offset) { fail_offset_ = offset; }
  uint64_t flushes = 0;  // read on the test thread once the server stopped

 private:
  struct slot {
    io x;  // first: release() casts the io back to its slot
    std::vector<iovec> vecs;
    std::vector<uint8_t> memory;
  };
  std::vector<uint8_t> data_;
  uint32_t block_;
  uint32_t max_io_;
  uint32_t segment_;
  bool read_only_;
  bool same_thread_ = false;
  std::vector<slot> ios_;
  std::vector<slot*> free_;
  std::mutex mutex_;
  std::vector<io*> done_;     // under mutex_
  std::deque<io*> held_ios_;  // under mutex_
  bool hold_ = false;
  bool shuffle_ = false;
  uint32_t largest_ = UINT32_MAX;
  std::minstd_rand rng_;  // under mutex_
  std::optional<uint64_t> fail_offset_;
  void mark(uint64_t offset, uint64_t length, bool allocated) {
    for (uint64_t b = offset / block_; b < (offset + length + block_ - 1) / block_; ++b)
      allocated_[b] = allocated;
  }
  std::vector<bool> allocated_ = std::vector<bool>(data_.size() / block_);
  bool sparse_ = true;
  uint64_t limit_ = 0;
  uint64_t held_ = 0;
  size_t peak_ios_ = 0;
  int fd_ = -1;
};

}  // namespace zc::nbd::test
