#include "core/memory_map.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

// A new memfd of `mapped` bytes named by a fresh token, its size sealed: an importer's mapping
// can never run past the end of the file (SIGBUS). With `reserve`, its pages are allocated now,
// so running out of memory is an error here and not a SIGBUS on the first touch.
void memory_map::make_memfd(size_t mapped, bool reserve) {
  uint64_t a = random_u64(), b = random_u64();
  memfd_token_ = fmt::format("{:016x}{:016x}", a, b);
  std::string name = "zcstore-" + memfd_token_;
  memfd_ = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd_ < 0) throw status_error(status::no_memory, os_error("memfd_create"));
  if (ftruncate(memfd_, static_cast<off_t>(mapped)) != 0)
    throw status_error(status::no_memory, os_error("ftruncate"));
  if (reserve && fallocate(memfd_, 0, 0, static_cast<off_t>(mapped)) != 0 && errno != EOPNOTSUPP)
    throw status_error(
        errno == ENOSPC || errno == ENOMEM ? status::no_memory : status::operating_system,
        os_error(fmt::format("reserving {} bytes of shareable memory", mapped).c_str()));
  if (fcntl(memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
    throw status_error(status::operating_system, os_error("sealing the memory size"));
}

// A read-only PCI export: no process can map this memory writable any more (this one keeps the
// mapping it has), so an importer cannot upgrade itself by editing the blob. Then the seals are
// frozen: an importer holding a writable descriptor (through /proc) could otherwise add
// F_SEAL_FUTURE_WRITE and lock every later importer out of writing.
void memory_map::seal_memfd() {
  int seals = F_SEAL_SEAL;
  if (has(permissions_, access::pci_read_only) && !has(permissions_, access::pci_read_write))
    seals |= F_SEAL_FUTURE_WRITE;
  if (fcntl(memfd_, F_ADD_SEALS, seals) != 0)
    throw status_error(status::operating_system, os_error("sealing the memory"));
}

std::unique_ptr<memory_map> memory_map::allocate(size_t length, access permissions) {
  if (length == 0) throw status_error(status::invalid_value, "memory map needs a non-empty range");
  std::unique_ptr<memory_map> map(new memory_map());
  const size_t mapped = page_round(length);
  map->make_memfd(mapped, false);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, map->memfd_, 0);
  if (p == MAP_FAILED) throw status_error(status::no_memory, os_error("mmap"));
  map->data_ = static_cast<uint8_t*>(p);
  map->size_ = length;
  map->permissions_ = permissions;
  map->owns_mapping_ = true;
  map->seal_memfd();
  return map;
}

namespace {

// Every page of [begin, end) is mapped private, readable and writable (/proc/self/maps, whose
// lines are sorted by address). Throws invalid_value for a gap, not_permitted otherwise.
void check_private_writable(uintptr_t begin, uintptr_t end) {
  FILE* f = fopen("/proc/self/maps", "re");
  if (f == nullptr) throw status_error(status::operating_system, os_error("/proc/self/maps"));
  uintptr_t covered = begin;
  char* line = nullptr;  // getline: a line with a long path is still one line
  size_t capacity = 0;
  std::string refusal;
  while (covered < end && refusal.empty() && getline(&line, &capacity, f) >= 0) {
    unsigned long lo = 0, hi = 0;
    char perms[5] = {};
    if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3 || hi <= covered) continue;
    if (lo > covered) break;  // a gap
    if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p')
      refusal = fmt::format(
          "memory at {:#x} is mapped {} (adoption needs private read-write "
          "memory)",
          std::max<uintptr_t>(lo, begin), perms);
    covered = hi;
  }
  free(line);
  fclose(f);
  if (!refusal.empty()) throw status_error(status::not_permitted, refusal);
  if (covered < end)
    throw status_error(status::invalid_value,
                       fmt::format("memory at {:#x} is not mapped", std::max(covered, begin)));
}

// pwrite/pread of a whole range, in pieces the kernel accepts.
bool copy_to_file(int fd, const void* from, size_t n) {
  const auto* p = static_cast<const uint8_t*>(from);
  for (size_t done = 0; done < n;) {
    const ssize_t w =
        pwrite(fd, p + done, std::min<size_t>(n - done, 1 << 30), static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

bool copy_from_file(int fd, void* to, size_t n) {
  auto* p = static_cast<uint8_t*>(to);
  for (size_t done = 0; done < n;) {
    const ssize_t r =
        pread(fd, p + done, std::min<size_t>(n - done, 1 << 30), static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    done += static_cast<size_t>(r);
  }
  return true;
}

// Memory the kernel says it could still give (MemAvailable + SwapFree), or SIZE_MAX if unknown.
size_t available_memory() {
  FILE* f = fopen("/proc/meminfo", "re");
  if (f == nullptr) return SIZE_MAX;
  unsigned long long available = 0, swap = 0, kib = 0;
  bool found = false;
  char line[256];
  while (fgets(line, sizeof(line), f) != nullptr) {
    if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
      available = kib;
      found = true;
    } else if (sscanf(line, "SwapFree: %llu kB", &kib) == 1) {
      swap = kib;
    }
  }
  fclose(f);
  return found ? static_cast<size_t>((available + swap) * 1024) : SIZE_MAX;
}

}  // namespace

std::unique_ptr<memory_map> memory_map::adopt(void* addr, size_t length, access permissions) {
  const auto begin = reinterpret_cast<uintptr_t>(addr);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (addr == nullptr || length == 0 || begin > UINTPTR_MAX - length)
    throw status_error(status::invalid_value, "memory map needs a non-empty range");
  if (begin % page != 0 || length % page != 0)
    throw status_error(
        status::invalid_value,
        fmt::format("cannot adopt {}+{} for PCI sharing: address and length must be multiples of "
                    "the page size ({}), or a peer would see the rest of the pages",
                    addr, length, page));
  check_private_writable(begin, begin + length);
  // The copy needs `length` more bytes until the old pages go. Refused up front when it cannot
  // fit: the kernel would rather end a process than fail fallocate for memfd pages.
  if (const size_t available = available_memory(); length > available)
    throw status_error(status::no_memory,
                       fmt::format("cannot adopt {} bytes for PCI sharing: only {} bytes of memory "
                                   "are available for the copy",
                                   length, available));
  std::unique_ptr<memory_map> map(new memory_map());
  map->permissions_ = permissions;
  map->make_memfd(length, true);
  if (!copy_to_file(map->memfd_, addr, length))
    throw status_error(status::no_memory, os_error("copying the memory to adopt"));
  // One mmap puts the memfd over the range: until it the caller's pages are untouched, after it
  // they are the memfd's, with the same contents. (Not mremap: UCX's hook on it drops
  // MREMAP_FIXED's address, and the copy would land elsewhere.)
  void* p = mmap(addr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, map->memfd_, 0);
  if (p != addr) {
    const int e = errno;
    if (p != MAP_FAILED) munmap(p, length);
    map->put_back_if_unmapped(addr, length);
    errno = e;
    throw status_error(status::no_memory, os_error("mapping the adopted memory"));
  }
  map->data_ = static_cast<uint8_t*>(addr);
  map->size_ = length;
  map->adopted_ = true;  // from here on the destructor gives the range back as private memory
  map->seal_memfd();
  return map;
}

// A failed MAP_FIXED may have unmapped the range before failing: then the memfd's copy (the
// contents as they were) is mapped back there, private, so the caller loses neither.
void memory_map::put_back_if_unmapped(void* addr, size_t length) noexcept {
  void* p = mmap(addr, length, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return;  // still mapped: untouched
  if (p == addr && copy_from_file(memfd_, addr, length)) return;
  if (p != addr) munmap(p, length);
  // Last resort: the memfd itself, shared but with the contents.
  if (mmap(addr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd_, 0) != addr)
    ZC_SDK_LOG_ERROR("memory {}+{} was unmapped by a failed adoption and could not be restored",
                     addr, length);
}

// Puts private anonymous memory with the current contents back over an adopted range, if the
// range is still the memfd's mapping (the caller may have freed it, against the rules: then
// nothing is touched).
void memory_map::release_adopted() noexcept {
  const auto begin = reinterpret_cast<uintptr_t>(data_);
  const std::string link = fmt::format("/proc/self/map_files/{:x}-{:x}", begin, begin + size_);
  char target[256] = {};
  const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  if ((n >= 0 && std::string_view(target, static_cast<size_t>(n)).find(memfd_token_) ==
                     std::string_view::npos) ||
      (n < 0 && errno == ENOENT)) {
    ZC_SDK_LOG_ERROR(
        "adopted memory {}+{} is no longer mapped as adopted (freed or remapped before its "
        "memory map was destroyed); left as it is",
        static_cast<const void*>(data_), size_);
    return;
  }
  // Fresh private pages over the range, filled from the memfd, which still holds the contents;
  // if either step fails the memfd goes back over the range (shared, but valid and intact).
  void* p =
      mmap(data_, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == data_ && copy_from_file(memfd_, data_, size_)) return;
  const int e = errno;
  if (p != MAP_FAILED && p != data_) munmap(p, size_);
  if (mmap(data_, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd_, 0) != data_) {
    ZC_SDK_LOG_ERROR("adopted memory {}+{} could not be given back: {}",
                     static_cast<const void*>(data_), size_, strerror(errno));
    return;
  }
  ZC_SDK_LOG_ERROR(
      "adopted memory {}+{} stays shared after its memory map is gone ({}); its contents are "
      "intact",
      static_cast<const void*>(data_), size_, strerror(e));
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
  if (adopted_) release_adopted();
  if (memfd_ >= 0) close(memfd_);
}

// PCI export payload: u32 pid, u32 fd, 16-byte token, u64 length, u32 access.
std::vector<uint8_t> memory_map::export_pci() const {
  if (!has(permissions_, access::pci_read_only) && !has(permissions_, access::pci_read_write))
    throw status_error(status::not_permitted, "memory map lacks PCI access; cannot export it");
  if (memfd_ < 0 || memfd_token_.size() != 2 * token_bytes)
    throw status_error(status::not_supported,
                       "only memory from memory_map::allocate or adopt can be exported for PCI");
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
