// What an initiator run does, worked out before any worker starts (REFERENCE_SPEC §4): the steps
// of each transaction, the split of the local IO region and of the storage across workers, the
// rings of offsets each worker rotates through, and the expected storage contents that the
// validity tests compare against. Pure computation, except for reading the expected-content file.
//
//   execution_plan plan({.strategy = config.strategy(), .storage_capacity = capacity,
//                        .block_size = block_size, .blocks_per_io = config.blocks_per_io,
//                        .worker_count = n, .transaction_count = config.transaction_count,
//                        .run_limit = config.run_limit_operation_count},
//                       config.storage_plain_content);
//   auto local = plan.local_offsets(worker), storage = plan.storage_offsets(worker);
//
// Thread rules: an execution_plan is immutable once built and may be read from every worker at
// once; an offset_ring belongs to one worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "initiator_config.hpp"

namespace zc::initiator {

// One step of a transaction. A transaction runs its steps in this order; write and read are
// asynchronous (the transaction resumes when both the send and the response have completed).
enum class step : uint8_t { copy_expected, write, clear, read, validate, finish };

std::string_view to_string(step s) noexcept;

// The steps of every transaction of `strategy` (§4.1), in order.
std::span<const step> steps_of(execution_strategy strategy) noexcept;

// A FIFO of offsets, filled once at construction: a starting transaction takes the head, a
// finished one puts its offset back at the tail, so offsets rotate round robin. Capacity is fixed
// (8 bytes per entry, allocated once); pop and push never allocate. One worker's.
class offset_ring {
 public:
  // Holds first, first + stride, ..., first + (count - 1) * stride.
  offset_ring(uint64_t first, uint64_t stride, uint64_t count);

  // The oldest offset, or nullopt when every offset is in use.
  std::optional<uint64_t> pop() noexcept;
  // Returns an offset taken by pop(); false (and nothing stored) when the ring is already full.
  bool push(uint64_t offset) noexcept;

  std::size_t size() const noexcept { return size_; }
  std::size_t capacity() const noexcept { return slots_.size(); }
  bool empty() const noexcept { return size_ == 0; }

 private:
  std::vector<uint64_t> slots_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

// One worker's share. "Blocks" here are IO-sized (Be = k x B bytes), as in §4.2.
struct worker_slice {
  uint64_t local_offset = 0;  // first byte of the worker's slice of the local IO region
  uint64_t local_blocks = 0;
  uint64_t storage_offset = 0;  // first byte of the worker's slice of the storage
  uint64_t storage_blocks = 0;
  uint32_t transaction_count = 0;  // T_i = min(T, local_blocks, storage_blocks)

  bool operator==(const worker_slice&) const = default;
};

// Splits local_blocks and storage_blocks evenly over `workers`, the first `remainder` workers
// getting one more block; each worker's slices are contiguous and start where the previous
// worker's end. Throws status_error(invalid_value) when either side has fewer blocks than
// workers ("Local IO region is too small to give each worker at least one block each").
std::vector<worker_slice> slice_workers(uint64_t local_blocks, uint64_t storage_blocks,
                                        uint64_t io_size, uint32_t workers,
                                        uint32_t transaction_count);

// A data mismatch found by a validity test.
struct mismatch_report {
  uint64_t storage_offset = 0;    // where the IO starts in the storage
  uint64_t first_difference = 0;  // offset inside the IO of the first differing byte
  std::string expected_hex;       // up to mismatch_report_bytes bytes from there, "0A 1B ..."
  std::string actual_hex;

  // "Memory read from storage target does not match expected value at storage offset ...".
  std::string message() const;
};

// Bytes of each side that a mismatch report shows.
inline constexpr std::size_t mismatch_report_bytes = 16;

// The plain contents the storage should hold: a file's bytes, or the pattern byte i = i mod 256
// (which takes no memory).
class expected_content {
 public:
  static expected_content pattern(uint64_t capacity);
  // Reads the whole file. Throws status_error: invalid_value when its size is not `capacity`
  // ("Validation tests require that the plain data: X size is the same as the storage capacity:
  // Y"), io_failed when it cannot be read.
  static expected_content from_file(const std::string& path, uint64_t capacity);

  uint64_t size() const noexcept { return capacity_; }
  // The copy-expected step: dst.size() bytes from storage_offset, which the caller keeps inside
  // size(). No allocation.
  void copy_to(uint64_t storage_offset, std::span<std::byte> dst) const noexcept;
  // The validate step: nullopt when `actual` equals the expected bytes at storage_offset
  // (no allocation then), otherwise what differs (also when the range leaves the storage).
  std::optional<mismatch_report> compare(uint64_t storage_offset,
                                         std::span<const std::byte> actual) const;

 private:
  uint64_t capacity_ = 0;
  std::vector<std::byte> bytes_;  // empty: the pattern
};

// What the initiator knows once the storage has answered its query, plus the configuration.
struct plan_request {
  execution_strategy strategy = execution_strategy::read_throughput_test;
  uint64_t storage_capacity = 0;      // bytes, as the storage reports it
  uint32_t block_size = 0;            // B, as the storage reports it
  uint64_t blocks_per_io = 1;         // k
  uint64_t local_io_region_size = 0;  // 0: the storage capacity
  uint32_t worker_count = 0;
  uint32_t transaction_count = 0;  // --transaction-count
  uint64_t run_limit = 0;          // --run-limit-operation-count, per worker
};

class execution_plan {
 public:
  // Throws status_error(invalid_value) with a message naming the problem when the run cannot be
  // laid out (no workers, a zero block size, an IO larger than the 32-bit io_size field, a region
  // too small for one block per worker, an expected-content file of the wrong size), or
  // io_failed when the expected-content file cannot be read. `plain_content_path` is used by the
  // validity tests only; read_write_data_validity_test falls back to the pattern without one.
  execution_plan(const plan_request& request, const std::string& plain_content_path);

  execution_strategy strategy() const noexcept { return request_.strategy; }
  std::span<const step> steps() const noexcept { return steps_of(request_.strategy); }
  // Be = k x B: the bytes every IO moves.
  uint64_t io_size() const noexcept { return io_size_; }
  // Bytes of local IO memory to allocate and export (partial blocks at the end stay unused).
  uint64_t local_region_size() const noexcept { return local_region_size_; }
  // T = min(transaction-count, run limit): what init_storage_request carries.
  uint32_t transaction_count() const noexcept { return transaction_count_; }
  uint64_t run_limit() const noexcept { return request_.run_limit; }
  std::span<const worker_slice> workers() const noexcept { return workers_; }

  // The worker's rings: local slice start + i x Be for every local block, and storage slice
  // start + i x Be for every storage block (the reference filled the storage ring from the local
  // count and so never reached part of the storage when local < storage).
  offset_ring local_offsets(std::size_t worker) const;
  offset_ring storage_offsets(std::size_t worker) const;

  // The expected contents; only for the validity tests.
  const expected_content* expected() const noexcept { return expected_ ? &*expected_ : nullptr; }
  // The validate step on one IO's local bytes (io_size() of them). nullopt: they match, or the
  // strategy does not validate.
  std::optional<mismatch_report> validate(std::span<const std::byte> local,
                                          uint64_t storage_offset) const;

 private:
  plan_request request_;
  uint64_t io_size_ = 0;
  uint64_t local_region_size_ = 0;
  uint32_t transaction_count_ = 0;
  std::vector<worker_slice> workers_;
  std::optional<expected_content> expected_;
};

}  // namespace zc::initiator
