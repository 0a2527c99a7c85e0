// The target's blocks: zeroed memory that a restart loses, or a file mapped shared
// (--backing-file), so that every write lands in the file's page cache and a flush makes it
// durable. The storage is never exported: the target starts every transfer itself.
// Thread rules: open and destroy on the main thread, after every worker has gone; map() and
// flush() from any thread (the workers').
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/memory_map.hpp"
#include "core/status.hpp"
#include "storage/unique_fd.hpp"

namespace zc::target {

// Where the blocks live and what they start with (zcstore_target_rdma's storage flags).
struct storage_options {
  std::string binary_content;
  std::string backing_file;  // empty: the blocks live in memory only
  uint32_t block_count = 128;
  uint32_t block_size = 4096;
  // On the command line (or in the JSON file): an existing backing file must then match exactly.
  bool block_count_given = false;
  // Fault injection for tests (--fail-reads-after N, --fail-writes-after N): every read (write)
  // after the first N is refused with IO_FAILED and not done, as a failing disk would.
  std::optional<uint64_t> fail_reads_after;
  std::optional<uint64_t> fail_writes_after;
  // (--drop-ios-after N): every IO after the first N is taken and never answered, as by a target
  // whose data path hangs while its control connection lives on.
  std::optional<uint64_t> drop_ios_after;
};

class target_storage {
 public:
  // Zeroed memory of `capacity` bytes. Throws status_error.
  static std::unique_ptr<target_storage> in_memory(uint64_t capacity);
  // What the configuration asks for, with its content loaded; settles config.block_size and
  // config.block_count (a .sbc content or an existing backing file decides them). A backing file
  // that does not exist is created with the geometry (and the content, if any); one that exists
  // is reopened as it is: its size must equal --block-size x --block-count when --block-count is
  // given, else be a non-zero multiple of the block size, which gives the block count. Content
  // together with an existing backing file is refused, never written over it. The file is locked
  // (flock): a second target on the same file is refused, and its blocks are allocated
  // (posix_fallocate), so that a full file system fails here rather than as a SIGBUS on a write.
  // Throws status_error with one line that names the file.
  static std::unique_ptr<target_storage> open(storage_options& config);

  ~target_storage();
  target_storage(const target_storage&) = delete;
  target_storage& operator=(const target_storage&) = delete;

  core::memory_map& map() noexcept { return *map_; }
  // False when the read or write about to be done must be refused instead (storage_options::
  // fail_reads_after, fail_writes_after). Any thread.
  bool admit_read() noexcept { return reads_.admit(); }
  bool admit_write() noexcept { return writes_.admit(); }
  // False when the IO about to be done must be left unanswered instead (drop_ios_after).
  bool answer_io() noexcept { return answered_.admit(); }

  bool durable() const noexcept { return mapping_ != nullptr; }
  // Makes every write that completed before the call durable: msync(MS_SYNC) of the whole
  // mapping, which blocks the caller for as long as the file system takes to write back the dirty
  // pages. Memory: success at once (volatile by design). io_failed when the sync fails.
  status flush() noexcept;

 private:
  target_storage() = default;

  std::string path_;
  storage::unique_fd fd_;
  uint8_t* mapping_ = nullptr;  // backing file only; unmapped after map_ is gone
  size_t mapping_length_ = 0;
  std::unique_ptr<core::memory_map> map_;
  // Fault injection: IOs of one kind done before every later one is refused.
  struct fault_budget {
    bool limited = false;
    std::atomic<uint64_t> left{0};
    void set(std::optional<uint64_t> n) noexcept {
      limited = n.has_value();
      left.store(n.value_or(0), std::memory_order_relaxed);
    }
    bool admit() noexcept {
      if (!limited) return true;
      uint64_t n = left.load(std::memory_order_relaxed);
      while (n != 0 && !left.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
      }
      return n != 0;
    }
  };
  fault_budget reads_;
  fault_budget writes_;
  fault_budget answered_;
};

}  // namespace zc::target
