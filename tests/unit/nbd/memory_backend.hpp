// A storage backend in memory, for the server's tests only: a fixed number of ios, each with its
// own buffer of max_io bytes, completed at once (on submit) but handed back through the same
// eventfd-signalled path as the real one. Optional faults: every IO at one offset fails.
#pragma once

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <vector>

#include "nbd/backend.hpp"

namespace zc::nbd::test {

class memory_backend final : public backend {
 public:
  memory_backend(uint64_t size, uint32_t block, uint32_t max_io, uint32_t ios,
                 bool read_only = false)
      : data_(size), block_(block), max_io_(max_io), read_only_(read_only), ios_(ios) {
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
    s->vec = {s->memory.data(), length};
    s->x.segments = {&s->vec, length == 0 ? 0u : 1u};
    return &s->x;
  }

  void submit(io& x) noexcept override {
    x.result = status::success;
    if (fail_offset_ && x.kind != io_kind::flush && *fail_offset_ >= x.offset &&
        *fail_offset_ < x.offset + x.length) {
      x.result = status::io_failed;
    } else if (x.kind == io_kind::read) {
      std::memcpy(x.segments[0].iov_base, data_.data() + x.offset, x.length);
    } else if (x.kind == io_kind::write) {
      std::memcpy(data_.data() + x.offset, x.segments[0].iov_base, x.length);
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
    iovec vec{};
    std::vector<uint8_t> memory;
  };
  std::vector<uint8_t> data_;
  uint32_t block_;
  uint32_t max_io_;
  bool read_only_;
  std::vector<slot> ios_;
  std::vector<slot*> free_;
  std::vector<io*> done_;
  std::optional<uint64_t> fail_offset_;
  int fd_ = -1;
};

}  // namespace zc::nbd::test
