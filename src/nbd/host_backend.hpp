// The NBD server's storage over a host::session (the zero-copy or gga pipeline): each worker has
// its transaction slots and its part of the session's IO region, slots_per_worker slices of at most
// max_blocks_per_message blocks (which gga takes). An io takes one slot per slice's worth of
// bytes (one IO message each) and, for each, a run of blocks inside one slice of the same worker:
// a 4 KiB request holds 4 KiB. It completes once every message has been answered. Submissions go
// to the worker's engine thread through a queue and a posted job; completions come back on that
// thread and reach the server's thread through a queue signalled by an eventfd.
//
//   host_backend b(session, {.capacity = info.capacity, .block_size = info.block_size,
//                            .slots_per_worker = t});
//
// Thread rules: the backend methods on the server's thread (see backend.hpp); build and destroy
// it on the control thread while the session's workers run.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "host/session.hpp"
#include "nbd/backend.hpp"
#include "nbd/block_runs.hpp"
#include "storage/unique_fd.hpp"

namespace zc::nbd {

// gga takes at most 255 blocks in one IO message; 128 keeps a slice a power of two (512 KiB with
// 4 KiB blocks).
inline constexpr uint32_t max_blocks_per_message = 128;
// The largest request an NBD client may send us (NBD_INFO_BLOCK_SIZE maximum).
inline constexpr uint32_t max_request_size = 32u << 20;

struct host_backend_options {
  uint64_t capacity = 0;  // bytes, from session::query()
  uint32_t block_size = 0;
  uint32_t slots_per_worker = 64;  // each worker's queue_options::slots
  bool read_only = false;
};

class host_backend final : public backend {
 public:
  // The bytes of one slice, and of the IO region the session must be initialised with.
  static uint32_t slice_size(uint64_t capacity, uint32_t block_size);
  static uint64_t region_size(const host_backend_options& o, uint32_t workers);

  // The session is initialised (with at least region_size() bytes), its workers built and
  // started; takes over their completion callbacks.
  host_backend(host::session& session, host_backend_options options);
  ~host_backend() override;
  host_backend(const host_backend&) = delete;
  host_backend& operator=(const host_backend&) = delete;

  uint64_t size() const noexcept override { return options_.capacity; }
  uint32_t block_size() const noexcept override { return options_.block_size; }
  uint32_t max_io() const noexcept override { return max_io_; }
  uint64_t memory() const noexcept override;
  uint32_t slots() const noexcept override;
  uint32_t slots_for(uint32_t length) const noexcept override;
  bool read_only() const noexcept override { return options_.read_only; }
  io* acquire(uint32_t length) noexcept override;
  void submit(io& x) noexcept override;
  void release(io& x) noexcept override;
  int completion_fd() const noexcept override { return done_fd_.get(); }
  void take_completions(std::vector<io*>& out) override;

 private:
  struct host_io;
  struct lane;  // one worker's share

  void run_inbox(lane& l) noexcept;
  void on_complete(lane& l, uint32_t slot, status result) noexcept;
  void complete(host_io& h) noexcept;
  // Where a run of a worker's blocks lies in the session's IO region.
  uint64_t address(const lane& l, const block_runs::run& r) const noexcept;

  host::session& session_;
  host_backend_options options_;
  uint32_t slice_;
  uint32_t max_io_;
  std::vector<std::unique_ptr<lane>> lanes_;
  std::vector<std::unique_ptr<host_io>> ios_;
  std::vector<host_io*> free_ios_;
  size_t next_lane_ = 0;
  storage::unique_fd done_fd_;
  std::mutex done_mutex_;
  std::vector<host_io*> done_;  // under done_mutex_
};

}  // namespace zc::nbd
