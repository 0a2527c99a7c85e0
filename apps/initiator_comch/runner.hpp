// One initiator worker's run (REFERENCE_SPEC §4): its transactions, each walking the strategy's
// steps over a local offset and a storage offset taken from the worker's rings, with the IOs
// going through the worker's host::io_queue. Exactly run_limit transactions unless the run ends
// early: the first IO error or data mismatch (reported with its storage offset) or a stop request
// ends it; transactions in flight then drain.
// Thread rules: built, run and destroyed on the worker's engine thread; completed() and done()
// may be read from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/memory_map.hpp"
#include "host/worker.hpp"
#include "stats.hpp"
#include "strategy.hpp"

namespace zc::initiator {

class worker_run {
 public:
  worker_run(const execution_plan& plan, std::size_t worker, host::io_queue& queue,
             core::memory_map& region, core::progress_engine& engine);
  ~worker_run();
  worker_run(const worker_run&) = delete;
  worker_run& operator=(const worker_run&) = delete;

  // Starts min(T_i, run_limit) transactions.
  void start();
  // Starts no more transactions; those in flight finish.
  void request_stop() noexcept;

  // No transaction in flight and none will start.
  bool done() const noexcept { return done_.load(std::memory_order_acquire); }
  uint64_t completed() const noexcept { return completed_.load(std::memory_order_relaxed); }
  // What ended the run early ("IO error at storage offset ...", a mismatch report); empty when
  // nothing failed. Read after done().
  const std::string& failure() const noexcept { return failure_; }
  // The worker's counters; read after done().
  worker_stats stats() const;

 private:
  struct transaction {
    uint64_t local_offset = 0;
    uint64_t storage_offset = 0;
    std::size_t step = 0;  // index into the strategy's steps
    std::chrono::steady_clock::time_point started{};
  };

  bool launch(uint32_t slot) noexcept;
  // Runs the steps of `slot` from its current one until an IO is in flight or it finished.
  void advance(uint32_t slot) noexcept;
  void on_complete(uint32_t slot, status result) noexcept;
  void finish(uint32_t slot) noexcept;
  void fail(std::string what) noexcept;
  void check_done() noexcept;
  std::span<std::byte> local_bytes(const transaction& t) const noexcept;

  const execution_plan& plan_;
  host::io_queue& queue_;
  core::memory_map& region_;
  core::progress_engine& engine_;
  std::span<const step> steps_;
  uint64_t io_size_;
  uint64_t run_limit_;
  offset_ring local_;
  offset_ring storage_;
  std::vector<transaction> transactions_;
  uint64_t launched_ = 0;
  uint32_t active_ = 0;  // transactions started and not finished
  bool stopping_ = false;
  bool started_ = false;
  std::string failure_;
  worker_stats stats_;
  uint64_t hits_at_start_ = 0;
  uint64_t misses_at_start_ = 0;
  std::atomic<uint64_t> completed_{0};
  std::atomic<bool> done_{false};
};

}  // namespace zc::initiator
