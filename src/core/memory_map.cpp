#include "core/memory_map.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/blob.hpp"
#include "core/bytes.hpp"
#include "core/export_table.hpp"
#include "core/log.hpp"
#include "core/random.hpp"

namespace zc::core {
namespace {

constexpr size_t token_bytes = 16;

size_t page_round(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}

std::string os_error(const char* what) {
  return fmt::format("{}: {}", what, strerror(errno));
}

access without_write_rights(access permissions) {
  constexpr auto write_rights = static_cast<uint32_t>(
      access::local_read_write | access::rdma_write | access::rdma_atomic | access::pci_read_write);
  return static_cast<access>(static_cast<uint32_t>(permissions) & ~write_rights);
}

}  // namespace

// What a map shares with its RDMA exports: the mapping the map owns, if any, unmapped only when
// the map and every export still draining claims have let go (each export's release action holds
// a reference), and how many of its exports have not yet drained.
struct internal::rdma_export_owner {
  uint8_t* mapping = nullptr;
  size_t mapping_length = 0;
  std::atomic<uint32_t> undrained{0};

  ~rdma_export_owner() {
    if (mapping != nullptr) munmap(mapping, mapping_length);
  }
};

uint64_t process_token() noexcept {
  static const uint64_t token = [] {
    uint64_t v = 0;
    v = random_nonzero_u64();
    return v;
  }();
  return token;
}

std::unique_ptr<memory_map> memory_map::wrap(void* addr, size_t length, access permissions) {
  if (addr == nullptr || length == 0)
    throw status_error(status::invalid_value, "memory map needs a non-empty range");
  std::unique_ptr<memory_map> map(new memory_map());
  map->data_ = static_cast<uint8_t*>(addr);
  map->size_ = length;
  map->permissions_ = permissions;
  return map;
}

std::unique_ptr<memory_map> memory_map::allocate(size_t length, access permissions) {
  if (length == 0) throw status_error(status::invalid_value, "memory map needs a non-empty range");
  std::unique_ptr<memory_map> map(new memory_map());
  uint64_t a = random_u64(), b = random_u64();
  map->memfd_token_ = fmt::format("{:016x}{:016x}", a, b);
  std::string name = "zcstore-" + map->memfd_token_;
  map->memfd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (map->memfd_ < 0) throw status_error(status::no_memory, os_error("memfd_create"));
  const size_t mapped = page_round(length);
  if (ftruncate(map->memfd_, static_cast<off_t>(mapped)) != 0)
    throw status_error(status::no_memory, os_error("ftruncate"));
  // Fixed size from now on: an importer's mapping can never run past the end of the file (SIGBUS).
  if (fcntl(map->memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
    throw status_error(status::operating_system, os_error("sealing the memory size"));
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, map->memfd_, 0);
  if (p == MAP_FAILED) throw status_error(status::no_memory, os_error("mmap"));
  map->data_ = static_cast<uint8_t*>(p);
  map->size_ = length;
  map->permissions_ = permissions;
  map->owns_mapping_ = true;
  // A read-only PCI export: no process can map this memory writable any more (this one keeps the
  // mapping it has), so an importer cannot upgrade itself by editing the blob. Then the seals are
  // frozen: an importer holding a writable descriptor (through /proc) could otherwise add
  // F_SEAL_FUTURE_WRITE and lock every later importer out of writing.
  int seals = F_SEAL_SEAL;
  if (has(permissions, access::pci_read_only) && !has(permissions, access::pci_read_write))
    seals |= F_SEAL_FUTURE_WRITE;
  if (fcntl(map->memfd_, F_ADD_SEALS, seals) != 0)
    throw status_error(status::operating_system, os_error("sealing the memory"));
  return map;
}

memory_map::~memory_map() {
  withdraw_rdma_export();
  if (export_owner_ != nullptr) {
    // Ever RDMA-exported: the mapping (if the map owns one) now belongs to export_owner_, which
    // unmaps it once this map and every export still draining have let go.
    if (export_owner_->undrained.load(std::memory_order_acquire) != 0 && !owns_mapping_)
      ZC_SDK_LOG_ERROR(
          "memory map {}+{} destroyed while a peer's RDMA transfer still holds it; its memory "
          "must outlive the transfer: stop the rdma contexts before freeing wrapped memory",
          static_cast<const void*>(data_), size_);
    export_owner_.reset();
  } else if (owns_mapping_) {
    munmap(data_, page_round(size_));
  }
  if (memfd_ >= 0) close(memfd_);
}

// PCI export payload: u32 pid, u32 fd, 16-byte token, u64 length, u32 access.
std::vector<uint8_t> memory_map::export_pci() const {
  if (!has(permissions_, access::pci_read_only) && !has(permissions_, access::pci_read_write))
    throw status_error(status::not_permitted, "memory map lacks PCI access; cannot export it");
  if (memfd_ < 0 || memfd_token_.size() != 2 * token_bytes)
    throw status_error(status::not_supported,
                       "only memory from memory_map::allocate can be exported for PCI");
  std::vector<uint8_t> payload;
  byte_writer w(payload);
  w.u32(static_cast<uint32_t>(getpid()));
  w.u32(static_cast<uint32_t>(memfd_));
  w.bytes({reinterpret_cast<const uint8_t*>(memfd_token_.data()), memfd_token_.size()});
  w.u64(size_);
  w.u32(static_cast<uint32_t>(permissions_));
  return frame_blob(blob_kind::pci_memory, payload);
}

std::unique_ptr<memory_map> memory_map::import_pci(std::span<const uint8_t> blob) {
  std::span<const uint8_t> payload;
  throw_if_failed(parse_blob(blob, blob_kind::pci_memory, payload), "malformed PCI export blob");
  byte_reader r(payload);
  uint32_t pid = r.u32();
  uint32_t fd = r.u32();
  auto token_span = r.bytes(2 * token_bytes);
  uint64_t length = r.u64();
  auto permissions = static_cast<access>(r.u32());
  if (!r.ok() || r.remaining() != 0 || length == 0)
    throw status_error(status::invalid_value, "malformed PCI export blob");
  std::string token(reinterpret_cast<const char*>(token_span.data()), token_span.size());

  // The exporter's memfd, reached through /proc; its name proves it is the memory the blob names
  // and not some later file that reused the pid or fd number.
  std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
  char target[256] = {};
  ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
  if (n < 0)
    throw status_error(status::not_found,
                       fmt::format("PCI export of process {} is gone (exporter exited?)", pid));
  if (std::string_view(target, static_cast<size_t>(n)).find("zcstore-" + token) ==
      std::string_view::npos)
    throw status_error(status::not_permitted,
                       "PCI export blob does not match the exporter's memory");
  const bool writable = has(permissions, access::pci_read_write);
  int memfd = open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (memfd < 0)
    throw status_error(errno == ENOENT ? status::not_found : status::not_permitted,
                       os_error("cannot open exported memory"));
  // Only memory whose size is sealed: otherwise its owner could shrink it under our mapping.
  const int seals = fcntl(memfd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    close(memfd);
    throw status_error(status::not_permitted, "PCI export is not size-sealed");
  }
  struct stat st {};
  if (fstat(memfd, &st) != 0 || static_cast<uint64_t>(st.st_size) < length) {
    close(memfd);
    throw status_error(status::invalid_value, "PCI export is larger than the exporter's memory");
  }
  void* p = mmap(nullptr, page_round(length), writable ? PROT_READ | PROT_WRITE : PROT_READ,
                 MAP_SHARED, memfd, 0);
  if (p == MAP_FAILED) {
    const bool sealed = errno == EPERM;
    close(memfd);
    if (sealed)
      throw status_error(status::not_permitted, "PCI export is read-only; the blob claims more");
    throw status_error(status::no_memory, os_error("mmap of PCI export"));
  }
  std::unique_ptr<memory_map> map(new memory_map());
  map->data_ = static_cast<uint8_t*>(p);
  map->size_ = length;
  // The blob speaks for the exporter's map; ours is only as writable as the mapping we got. A
  // write right kept here would let export_rdma() offer this read-only mapping to remote
  // writers, and the first one would crash this process.
  map->permissions_ = writable ? permissions : without_write_rights(permissions);
  map->memfd_ = memfd;
  map->owns_mapping_ = true;
  return map;
}

// RDMA export payload (docs/FORMATS.md §5): u64 owner token, u64 export id, u64 key, u64 base,
// u64 length, u32 access.
std::vector<uint8_t> memory_map::export_rdma() {
  if (is_remote()) throw status_error(status::not_supported, "a remote map cannot be re-exported");
  if ((static_cast<uint32_t>(permissions_) & static_cast<uint32_t>(rdma_all)) == 0)
    throw status_error(status::not_permitted, "memory map lacks RDMA access; cannot export it");
  if (export_slot_ == 0) {
    if (export_owner_ == nullptr) {
      export_owner_ = std::make_shared<internal::rdma_export_owner>();
      if (owns_mapping_) {
        export_owner_->mapping = data_;
        export_owner_->mapping_length = page_round(size_);
      }
    }
    export_owner_->undrained.fetch_add(1, std::memory_order_relaxed);
    try {
      // Runs once this export is withdrawn and drained, on the thread that drops its last claim.
      auto e = export_table::add(data_, size_, permissions_, [owner = export_owner_]() mutable {
        owner->undrained.fetch_sub(1, std::memory_order_release);
        owner.reset();  // the last reference unmaps
      });
      export_slot_ = e.id;
      export_key_ = e.key;
    } catch (...) {
      export_owner_->undrained.fetch_sub(1, std::memory_order_relaxed);
      throw;
    }
  }
  std::vector<uint8_t> payload;
  byte_writer w(payload);
  w.u64(process_token());
  w.u64(export_slot_);
  w.u64(export_key_);
  w.u64(reinterpret_cast<uintptr_t>(data_));
  w.u64(size_);
  w.u32(static_cast<uint32_t>(permissions_));
  return frame_blob(blob_kind::rdma_memory, payload);
}

bool memory_map::rdma_export_drained() const noexcept {
  return export_slot_ == 0 &&
         (!export_owner_ || export_owner_->undrained.load(std::memory_order_acquire) == 0);
}

void memory_map::withdraw_rdma_export() noexcept {
  if (export_slot_ == 0) return;
  export_table::remove(export_slot_);
  export_slot_ = 0;
  export_key_ = 0;
}

std::unique_ptr<memory_map> memory_map::import_rdma(std::span<const uint8_t> blob) {
  std::span<const uint8_t> payload;
  throw_if_failed(parse_blob(blob, blob_kind::rdma_memory, payload), "malformed RDMA export blob");
  byte_reader r(payload);
  remote_region remote;
  remote.owner_token = r.u64();
  remote.export_id = r.u64();
  remote.key = r.u64();
  remote.base = r.u64();
  remote.length = r.u64();
  remote.permissions = static_cast<access>(r.u32());
  if (!r.ok() || r.remaining() != 0 || remote.export_id == 0 || remote.key == 0 ||
      remote.length == 0 || remote.base + remote.length < remote.base)
    throw status_error(status::invalid_value, "malformed RDMA export blob");
  std::unique_ptr<memory_map> map(new memory_map());
  map->remote_ = remote;
  map->data_ = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(remote.base));
  map->size_ = remote.length;
  map->permissions_ = remote.permissions;
  return map;
}

}  // namespace zc::core
