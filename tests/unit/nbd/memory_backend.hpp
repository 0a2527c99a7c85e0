// A storage backend in memory, for the server's tests only: a fixed number of ios, each with its
// own buffer of max_io bytes (one segment, or segments of `segment` bytes, as host_backend cuts
// its slices), completed at once (on submit) but handed back through the same eventfd-signalled
// path as the real one. Optional faults: every IO at one offset fails.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
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
  uint64_t memory() const noexcept override { return uint64_t(max_io_) * ios_.size(); }
  bool read_only() const noexcept override { return read_only_; }

  io* acquire(uint32_t length) noexcept override {
    if (free_.empty() || length > max_io_) return nullptr;
    slot* s = free_.back();
    free_.pop_back();
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
    if (fail_offset_ && x.kind != io_kind::flush && *fail_offset_ >= x.offset &&
        *fail_offset_ < x.offset + x.length) {
      x.result = status::io_failed;
    } else if (x.kind == io_kind::read || x.kind == io_kind::write) {
      uint64_t at = x.offset;
      for (const iovec& v : x.segments) {
        if (x.kind == io_kind::read)
          std::memcpy(v.iov_base, data_.data() + at, v.iov_len);
        else
          std::memcpy(data_.data() + at, v.iov_base, v.iov_len);
        at += v.iov_len;
      }
    } else {
      ++flushes;
    }
    done_.push_back(&x);
    const uint64_t one = 1;
    (void)!::write(fd_, &one, sizeof one);
  }

  void release(io& x) noexcept override { free_.push_back(reinterpret_cast<slot*>(&x)); }

  int completion_fd() const noexcept override { return fd_; }
  void take_completions(std::vector<io*>& out) override {
    uint64_t v;
    (void)!::read(fd_, &v, sizeof v);
    out.insert(out.end(), done_.begin(), done_.end());
    done_.clear();
  }

  std::vector<uint8_t>& bytes() { return data_; }
  size_t free_ios() const { return free_.size(); }
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
  std::vector<slot> ios_;
  std::vector<slot*> free_;
  std::vector<io*> done_;
  std::optional<uint64_t> fail_offset_;
  int fd_ = -1;
};

}  // namespace zc::nbd::test
