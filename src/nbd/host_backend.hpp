// The NBD server's storage over one IO worker of a host::session (the zero-copy or gga pipeline),
// run to completion: the backend and its server (server_source.hpp) live on the worker's engine
// thread, so an io goes straight to the worker's queue and its completion waits for the server's
// next pass, which the backend asks the engine for (the server's source, set on attach). No thread
// is crossed, no lock taken, nothing posted or allocated per io. The worker has its transaction
// slots and its part of the session's IO region, slots_per_worker slices of at most
// max_blocks_per_message blocks (which gga takes). An io takes one slot per slice's worth of bytes
// (one IO message each) and, for each, a run of blocks inside one slice: a 4 KiB request holds 4
// KiB. It completes once every message has been answered.
//
//   host_backend b(session, {.capacity = info.capacity, .block_size = info.block_size,
//                            .slots_per_worker = t, .worker = i});
//   ... on the worker's thread: engine.attach(source); b.set_completion_source(&source);
//
// Thread rules: the backend methods on the worker's engine thread (see backend.hpp); build and
// destroy it on the control thread while the session's workers run.
#pragma once

#include <memory>
#include <vector>

#include "host/session.hpp"
#include "nbd/backend.hpp"
#include "nbd/block_runs.hpp"

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
  uint32_t worker = 0;  // the index of the session's worker this backend serves
};

class host_backend final : public backend {
 public:
  // The bytes of one slice, and of the IO region the session must be initialised with.
  static uint32_t slice_size(uint64_t capacity, uint32_t block_size);
  static uint64_t region_size(const host_backend_options& o, uint32_t workers);

  // The session is initialised (with at least region_size() bytes), its workers built and
  // started; takes over the completion callback of the worker's queue.
  host_backend(host::session& session, host_backend_options options);
  ~host_backend() override;
  host_backend(const host_backend&) = delete;
  host_backend& operator=(const host_backend&) = delete;

  uint64_t size() const noexcept override { return options_.capacity; }
  uint32_t block_size() const noexcept override { return options_.block_size; }
  uint32_t max_io() const noexcept override { return max_io_; }
  uint64_t memory() const noexcept override;
  uint32_t slots() const noexcept override { return options_.slots_per_worker; }
  uint32_t slots_for(uint32_t length) const noexcept override;
  bool read_only() const noexcept override { return options_.read_only; }
  io* acquire(uint32_t length) noexcept override;
  void submit(io& x) noexcept override;
  void release(io& x) noexcept override;
  int completion_fd() const noexcept override { return -1; }
  bool has_completions() const noexcept override { return !done_.empty(); }
  void take_completions(std::vector<io*>& out) override;
  // On the worker's thread: the event source whose pass_end() takes the completions (the
  // server's), asked for at the end of the engine pass that delivers the first of a batch; null
  // (before attach, after detach): completions wait for the server's next look.
  void set_completion_source(core::event_source* s) noexcept { source_ = s; }

 private:
  struct host_io;

  void on_complete(uint32_t slot, status result) noexcept;
  // Where a run of the worker's blocks lies in the session's IO region.
  uint64_t address(const block_runs::run& r) const noexcept;

  host::session& session_;
  host_backend_options options_;
  host::worker* worker_ = nullptr;
  core::progress_engine* engine_ = nullptr;  // the worker's
  core::event_source* source_ = nullptr;
  uint32_t slice_;
  uint32_t max_io_;
  uint64_t region_base_ = 0;  // the worker's first slice
  block_runs blocks_;         // the worker's IO memory, block by block
  std::vector<uint32_t> free_slots_;
  std::vector<host_io*> owner_;  // slot -> its io
  std::vector<std::unique_ptr<host_io>> ios_;
  std::vector<host_io*> free_ios_;
  std::vector<host_io*> done_;  // completed, not yet taken
};

}  // namespace zc::nbd
