// The target's blocks: zeroed memory that a restart loses, or a file mapped shared
// (--backing-file), so that every write lands in the file's page cache and a flush makes it
// durable. The storage is never exported: the target starts every transfer itself. Blocks may be
// deallocated (discard, write zeroes: zeroed memory, holes punched in the file) and their
// allocation asked for (allocation map), DESIGN §2 types 4 to 6.
// Thread rules: open and destroy on the main thread, after every worker has gone; map() and
// flush() from any thread (the workers').
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/memory_map.hpp"
#include "core/status.hpp"
#include "storage/unique_fd.hpp"
#include "target/block_bitmap.hpp"

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
  // after the first N is refused with IO_FAILED and not done, as a failing disk would. Discards
  // and write zeroes count as writes.
  std::optional<uint64_t> fail_reads_after;
  std::optional<uint64_t> fail_writes_after;
  // (--drop-ios-after N): every IO after the first N is taken and never answered, as by a target
  // whose data path hangs while its control connection lives on.
  std::optional<uint64_t> drop_ios_after;
};

class target_storage {
 public:
  // Zeroed memory of `capacity` bytes, in blocks of `block_size` (the last one may be short).
  // Throws status_error.
  static std::unique_ptr<target_storage> in_memory(uint64_t capacity, uint32_t block_size = 4096);
  // What the configuration asks for, with its content loaded; settles config.block_size and
  // config.block_count (a .sbc content or an existing backing file decides them). A backing file
  // that does not exist is created with the geometry (and the content, if any); one that exists
  // is reopened as it is: its size must equal --block-size x --block-count when --block-count is
  // given, else be a non-zero multiple of the block size, which gives the block count. Content
  // together with an existing backing file is refused, never written over it. The file is locked
  // (flock): a second target on the same file is refused. A file created here has every block
  // allocated (posix_fallocate), so that a full file system fails here rather than later; an
  // existing file is reopened as it is, its holes kept (those a discard or write zeroes punched
  // stay free across restarts). Its holes are found (SEEK_HOLE) and remembered, and a write into
  // one allocates the blocks first (prepare_write): a full file system then fails that write with
  // IO_FAILED, never as a SIGBUS of the target when the write lands in the mapping. (On tmpfs,
  // where the file's pages are its storage, even a read of a hole takes a page: a full tmpfs
  // can still fail one. Disk file systems read holes from the page cache alone.)
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

  uint32_t block_size() const noexcept { return block_size_; }

  // DESIGN §2 types 4 and 5 (discard, write zeroes): afterwards [offset, offset + length) reads
  // back as zeros. Memory: zeroed, its blocks no longer allocated. Backing file: a hole punched
  // (fallocate PUNCH_HOLE | KEEP_SIZE), so the file system frees the blocks; a file system
  // without hole punching gets the zeros written instead. The range is whole blocks inside the
  // storage (the worker checked). Takes as long as the memset or the file system takes: call it
  // off the data path. io_failed when the punch fails (logged). Any thread.
  status deallocate(uint64_t offset, uint64_t length) noexcept;
  // Called before a write (type 2) of [offset, offset + length) lands in the storage. Memory:
  // marks its blocks allocated. Backing file: when the range touches a block that may be a hole,
  // allocates those blocks (fallocate) first, since a write through the shared mapping into a
  // hole on a full file system is a SIGBUS; io_failed (logged) when that fails, and the write
  // must then not be done. Cheap unless there is a hole to fill. Any thread.
  // A discard of the same blocks at the same time may punch them again between this call and
  // the write: the two IOs are not ordered against each other, and a host does not send both at
  // once for one block (its own result would be undefined).
  status prepare_write(uint64_t offset, uint64_t length) noexcept;
  // DESIGN §2 type 6: bit i of `bitmap` (byte i / 8, bit i % 8, least significant first) = 1 when
  // block first_block + i is allocated or may not read back as zeros; bits past the last block
  // are 0. Memory: the blocks written or loaded with content since start and not deallocated
  // since. Backing file: the blocks that hold any data byte as SEEK_DATA / SEEK_HOLE see them.
  // first_block must be inside the storage. io_failed when the file cannot be searched. Any
  // thread; as long as the file system takes for a file of many extents.
  status allocation_map(uint64_t first_block, std::span<uint8_t> bitmap) noexcept;

  bool durable() const noexcept { return mapping_ != nullptr; }
  // Makes every write that completed before the call durable: msync(MS_SYNC) of the whole
  // mapping, which blocks the caller for as long as the file system takes to write back the dirty
  // pages, then fsync of the file when a hole was punched since the last flush (a punch changes
  // the file's metadata, which msync does not write). Memory: success at once (volatile by
  // design). io_failed when the sync fails.
  status flush() noexcept;

 private:
  target_storage() = default;

  std::string path_;
  storage::unique_fd fd_;
  uint8_t* mapping_ = nullptr;  // backing file only; unmapped after map_ is gone
  size_t mapping_length_ = 0;
  std::unique_ptr<core::memory_map> map_;
  uint32_t block_size_ = 4096;
  uint64_t block_count_ = 0;
  // Memory: blocks written or loaded since start and not deallocated since.
  std::unique_ptr<block_bitmap> allocated_;
  // Backing file: blocks that may be holes (found at open, punched since); a write into one
  // allocates it first.
  std::unique_ptr<block_bitmap> holes_;
  // A hole was punched since the last flush began: the next flush fsyncs the file.
  std::atomic<bool> punched_{false};
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
