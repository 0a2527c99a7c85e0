// zc::core::memory_map, DOCA's doca_mmap: a memory range plus who may touch it and how.
// A map is local (memory of this process: wrapped, or allocated from a memfd so it can be shared),
// imported from a PCI export (the exporter's pages mapped here: the same physical memory, no
// copy), or imported from an RDMA export (a description of a peer's memory, usable only as the
// remote side of rdma tasks). Exports are framed blobs (core/blob.hpp) carried out of band.
// Thread rules: create, export and destroy from one thread; data and lookups from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.hpp"

namespace zc::core {
namespace internal {
struct rdma_export_owner;
}

// DOCA's doca_access_flag values.
enum class access : uint32_t {
  local_read_only = 0,
  local_read_write = 1 << 0,
  rdma_read = 1 << 1,
  rdma_write = 1 << 2,
  rdma_atomic = 1 << 3,
  pci_read_only = 1 << 4,
  pci_read_write = 1 << 5,
};
constexpr access operator|(access a, access b) {
  return static_cast<access>(static_cast<uint32_t>(a) | static_cast<uint32_t>(b));
}
constexpr bool has(access set, access flag) {
  return (static_cast<uint32_t>(set) & static_cast<uint32_t>(flag)) == static_cast<uint32_t>(flag);
}
inline constexpr access rdma_all = access::rdma_read | access::rdma_write | access::rdma_atomic;

// What an RDMA export names: memory that lives in another process.
struct remote_region {
  uint64_t owner_token = 0;  // the exporting process instance
  uint64_t export_id = 0;    // its export table entry (slot + generation); not secret
  uint64_t key = 0;          // that export's own random key: only its blob carries it
  uint64_t base = 0;         // the exporter's address of byte 0
  uint64_t length = 0;
  access permissions = access::local_read_only;
};

class memory_map {
 public:
  // Memory the caller owns and keeps alive longer than the map. If it is RDMA-exported, a peer's
  // transfer in progress may still hold it after the map is withdrawn or destroyed (withdrawal
  // does not wait): stop every rdma context that serves peers on it before freeing the memory.
  // A map destroyed while such a claim is live logs an error. Memory the map owns (allocate,
  // import_pci) needs none of this: it stays mapped until the last claim on it is released.
  static std::unique_ptr<memory_map> wrap(void* addr, size_t length, access permissions);
  // Zeroed, page-aligned memory from a memfd, owned by the map; the only kind export_pci takes.
  // The memfd is sealed for good at once: its size, and with pci_read_only (but not
  // pci_read_write) any writable mapping but this map's own.
  static std::unique_ptr<memory_map> allocate(size_t length, access permissions);
  // Adopts memory the caller already has (malloc, aligned_alloc, a static array) so it can be
  // PCI-exported: the range is copied once into a new sealed memfd, which is then mapped
  // MAP_SHARED over the same addresses (one mmap with MAP_FIXED, which replaces the old pages).
  // The caller's pointers keep working and now reach shareable memory; export_pci() and
  // everything else work as for allocate(). Rules:
  // - addr and length must be multiples of the page size (invalid_value otherwise): an importer
  //   maps the whole memfd, so bytes of a partly covered page (malloc's bookkeeping, another
  //   object) would reach the peer.
  // - every page must be mapped private, readable and writable (anonymous memory, the heap, a
  //   program's .data/.bss), checked in /proc/self/maps: invalid_value for a gap, not_permitted
  //   for read-only memory or a shared mapping (a file or another memfd, which adoption would
  //   cut off from its file).
  // - the range takes its size in memory twice until the old pages go: a range larger than
  //   MemAvailable + SwapFree is refused with no_memory before anything is done, and the memfd
  //   is reserved up front (fallocate), so running short is an error, not a SIGBUS.
  // - no other thread may write the range while adopt() runs (its write could miss the copy),
  //   and the memory must stay allocated until the map is destroyed.
  // - failure of any step throws status_error and leaves the range as it was: same pages, same
  //   contents. (Should the kernel have unmapped the range in a failed MAP_FIXED, the copy is
  //   mapped back there: private memory, or as a last resort the memfd, contents intact.)
  // - no mremap: UCX's hook on it (loaded with the rdma layer) drops MREMAP_FIXED's address.
  // - destroying the map puts private anonymous memory with the current contents back over the
  //   range (filled from the memfd): the caller's memory stays valid, and importers keep only
  //   the memfd's pages, no longer the caller's. If that fails (no memory for the copy), the
  //   memfd is mapped there again (valid memory, same contents) and an error is logged. Nothing
  //   is touched if the range is no longer the memfd's mapping (freed too early).
  // - a fork() child shares the adopted pages with its parent instead of copying them.
  static std::unique_ptr<memory_map> adopt(void* addr, size_t length, access permissions);
  // Maps the pages of a PCI export into this process. The map has the exporter's permissions,
  // less every write right (local, rdma, atomic, pci) when the export is read-only. Throws
  // status_error: invalid_value for a malformed blob, not_found when the exporter has gone,
  // not_permitted for a foreign one.
  static std::unique_ptr<memory_map> import_pci(std::span<const uint8_t> blob);
  // Describes a peer's RDMA export. Throws status_error(invalid_value, ...) on a malformed blob.
  static std::unique_ptr<memory_map> import_rdma(std::span<const uint8_t> blob);

  ~memory_map();
  memory_map(const memory_map&) = delete;
  memory_map& operator=(const memory_map&) = delete;

  // PCI export of allocate()d or adopt()ed memory with a pci_* permission; throws not_permitted
  // without one, not_supported for other memory.
  std::vector<uint8_t> export_pci() const;
  // RDMA export of local memory with an rdma_* permission. The first call enters the map in the
  // process's export table under a fresh random key, which only this blob carries: hand it only
  // to peers that may reach this map. Peers lose access when the map is withdrawn or destroyed.
  std::vector<uint8_t> export_rdma();
  // Ends the RDMA export at once, without waiting: later requests from peers fail with
  // not_found; transfers already under way finish (see wrap()). A later export_rdma() is a new
  // export with a new id and key.
  void withdraw_rdma_export() noexcept;
  bool rdma_exported() const noexcept { return export_slot_ != 0; }
  // No RDMA export of this map is live or still claimed by a transfer: once withdrawn, true when
  // the last transfer that held it has finished, so no peer can reach the memory any more (a
  // fence). Any thread.
  bool rdma_export_drained() const noexcept;

  bool is_remote() const noexcept { return remote_.export_id != 0; }
  // Local maps: this process's address. Remote maps: the exporter's address (not dereferenceable).
  uint8_t* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  access permissions() const noexcept { return permissions_; }
  const remote_region& remote() const noexcept { return remote_; }
  bool contains(const void* p, size_t length) const noexcept {
    auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(data_);
    return a >= b && a - b <= size_ && length <= size_ - (a - b);
  }

 private:
  memory_map() = default;
  void make_memfd(size_t mapped, bool reserve);
  void seal_memfd();
  void release_adopted() noexcept;
  void put_back_if_unmapped(void* addr, size_t length) noexcept;

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  access permissions_ = access::local_read_only;
  int memfd_ = -1;
  bool owns_mapping_ = false;
  bool adopted_ = false;     // the caller's range, remapped over a memfd by adopt()
  std::string memfd_token_;  // random name proving a PCI import maps the right memfd
  uint64_t export_slot_ = 0;
  uint64_t export_key_ = 0;
  std::shared_ptr<internal::rdma_export_owner> export_owner_;  // shared with draining exports
  remote_region remote_;
};

// Random 64-bit identity of this process instance; tells our exports from another's.
uint64_t process_token() noexcept;

}  // namespace zc::core
