#include "target/storage.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>

#include "core/log.hpp"
#include "storage/sbc_file.hpp"

namespace zc::target {
namespace {

std::string os_error(const std::string& what) {
  return fmt::format("{}: {}", what, std::strerror(errno));
}

// A file just created is durable only once its directory entry is: fsync the directory too.
void sync_directory_of(const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  storage::unique_fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd || ::fsync(fd.get()) != 0)
    throw status_error(status::io_failed, os_error("cannot sync the directory of " + path));
}

// The block count an existing backing file of `size` bytes holds (the rules of open()).
uint32_t block_count_of(const storage_options& config, uint64_t size) {
  const uint64_t block = config.block_size;
  if (config.block_count_given) {
    const uint64_t want = block * config.block_count;
    if (size != want)
      throw status_error(status::invalid_value,
                         fmt::format("backing file {} is {} bytes, not the {} x {} = {} bytes of "
                                     "--block-size x --block-count",
                                     config.backing_file, size, block, config.block_count, want));
    return config.block_count;
  }
  if (size == 0 || size % block != 0 || size / block > std::numeric_limits<uint32_t>::max())
    throw status_error(status::invalid_value,
                       fmt::format("backing file {} is {} bytes, not a non-zero multiple of the "
                                   "block size {}",
                                   config.backing_file, size, block));
  return static_cast<uint32_t>(size / block);
}

// Sets in `holes` every block of the file's first `capacity` bytes that holds any byte of a hole
// (SEEK_HOLE / SEEK_DATA). A file system that cannot tell reports no hole, which is right for it:
// without holes it allocated every block. Throws status_error.
void find_holes(int fd, const std::string& path, uint32_t block_size, uint64_t capacity,
                block_bitmap& holes) {
  for (uint64_t at = 0; at < capacity;) {
    const off_t hole = ::lseek(fd, static_cast<off_t>(at), SEEK_HOLE);
    if (hole < 0 && errno == ENXIO) return;
    if (hole < 0) throw status_error(status::io_failed, os_error("cannot search " + path));
    if (uint64_t(hole) >= capacity) return;
    off_t data = ::lseek(fd, hole, SEEK_DATA);
    if (data < 0 && errno != ENXIO)
      throw status_error(status::io_failed, os_error("cannot search " + path));
    const uint64_t stop = data < 0 ? capacity : std::min<uint64_t>(uint64_t(data), capacity);
    const uint64_t first = uint64_t(hole) / block_size;
    holes.set(first, (stop + block_size - 1) / block_size - first);
    at = stop;
  }
}

}  // namespace

std::unique_ptr<target_storage> target_storage::in_memory(uint64_t capacity, uint32_t block_size) {
  std::unique_ptr<target_storage> s(new target_storage());
  // Zero-filled (the reference left it undefined).
  s->map_ = core::memory_map::allocate(capacity, core::access::local_read_write);
  s->block_size_ = block_size;
  s->block_count_ = (capacity + block_size - 1) / block_size;
  s->allocated_ = std::make_unique<block_bitmap>(s->block_count_);
  return s;
}

std::unique_ptr<target_storage> target_storage::open(storage_options& config) {
  auto with_faults = [&config](std::unique_ptr<target_storage> s) {
    s->reads_.set(config.fail_reads_after);
    s->writes_.set(config.fail_writes_after);
    s->answered_.set(config.drop_ios_after);
    if (config.drop_ios_after)
      ZC_LOG_WARN("fault injection: every IO after the first {} is left unanswered",
                  *config.drop_ios_after);
    if (config.fail_reads_after)
      ZC_LOG_WARN("fault injection: every read after the first {} is refused",
                  *config.fail_reads_after);
    if (config.fail_writes_after)
      ZC_LOG_WARN("fault injection: every write after the first {} is refused",
                  *config.fail_writes_after);
    return s;
  };
  const std::string& path = config.backing_file;
  storage::unique_fd fd;
  bool created = false;
  if (!path.empty()) {
    fd.reset(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    if (!fd && errno == ENOENT) {
      fd.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
      created = bool(fd);
    }
    if (!fd) throw status_error(status::io_failed, os_error("cannot open backing file " + path));
    // Two targets writing one file would corrupt each other's blocks. The lock goes with the
    // process, so a target killed with -9 leaves none behind.
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (created) ::unlink(path.c_str());
      throw status_error(status::in_use,
                         errno == EWOULDBLOCK
                             ? fmt::format("backing file {} is in use by another target", path)
                             : os_error("cannot lock backing file " + path));
    }
    if (!created && !config.binary_content.empty())
      throw status_error(status::already_exist,
                         fmt::format("backing file {} exists: --binary-content would overwrite "
                                     "its blocks (remove the file to load the content)",
                                     path));
  }
  // A file created here is removed again when anything below fails: no half-made store is left.
  try {
    // The content decides the geometry: a .sbc file carries its own, a raw file must match.
    std::optional<storage::binary_content_file> content;
    if (!config.binary_content.empty()) {
      content.emplace(config.binary_content, config.block_size, config.block_count);
      config.block_size = content->block_size();
      config.block_count = content->block_count();
    }
    if (fd && !created) {
      struct stat st {};
      if (::fstat(fd.get(), &st) != 0)
        throw status_error(status::io_failed, os_error("cannot stat backing file " + path));
      if (!S_ISREG(st.st_mode))
        throw status_error(status::invalid_value,
                           fmt::format("backing file {} is not a regular file", path));
      config.block_count = block_count_of(config, static_cast<uint64_t>(st.st_size));
    }
    const uint64_t capacity = uint64_t(config.block_size) * config.block_count;
    if (!fd) {
      auto s = in_memory(capacity, config.block_size);
      // Read straight into the storage: a staging copy would need twice its size in memory.
      if (content) {
        content->read_into({s->map_->data(), capacity});
        s->allocated_->set(0, s->block_count_);
      }
      return with_faults(std::move(s));
    }
    // A new file has every block allocated now: a full file system fails here, with one line.
    // Cheap where the file system has fallocate (extents marked unwritten). An existing file
    // keeps its holes (a trim must not be undone by a restart): they are found below, and a
    // write into one allocates it first (prepare_write), since a write into a hole of the mapping
    // on a full file system would kill the target with SIGBUS.
    if (created) {
      if (const int e = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(capacity)); e != 0) {
        errno = e;
        throw status_error(status::io_failed, os_error("cannot allocate backing file " + path));
      }
    }
    auto holes = std::make_unique<block_bitmap>(config.block_count);
    if (!created) find_holes(fd.get(), path, config.block_size, capacity, *holes);
    void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED)
      throw status_error(status::no_memory, os_error("cannot map backing file " + path));
    std::unique_ptr<target_storage> s(new target_storage());
    s->path_ = path;
    s->fd_ = std::move(fd);
    s->mapping_ = static_cast<uint8_t*>(p);
    s->mapping_length_ = capacity;
    s->map_ = core::memory_map::wrap(p, capacity, core::access::local_read_write);
    s->block_size_ = config.block_size;
    s->block_count_ = config.block_count;
    s->holes_ = std::move(holes);
    if (created) {
      if (content) content->read_into({s->mapping_, capacity});
      // The new store is durable before the first IO: a crash now cannot leave a file that is
      // half content and half zeros without anyone having been told it was ready.
      if (!ok(s->flush()) || ::fsync(s->fd_.get()) != 0)
        throw status_error(status::io_failed, os_error("cannot sync backing file " + path));
      sync_directory_of(path);
    }
    ZC_LOG_INFO("backing file {}: {} ({} blocks of {} bytes)", path,
                created ? "created" : "reopened", config.block_count, config.block_size);
    return with_faults(std::move(s));
  } catch (...) {
    if (created) ::unlink(path.c_str());
    throw;
  }
}

target_storage::~target_storage() {
  map_.reset();
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_length_);
}

status target_storage::flush() noexcept {
  if (mapping_ == nullptr) return status::success;
  // Taken before the syncs: a punch that ends after this is left for the next flush.
  const bool punched = punched_.exchange(false);
  if (::msync(mapping_, mapping_length_, MS_SYNC) != 0 || (punched && ::fsync(fd_.get()) != 0)) {
    ZC_LOG_ERROR("flush of backing file {} failed: {}", path_, std::strerror(errno));
    if (punched) punched_.store(true);
    return status::io_failed;
  }
  return status::success;
}

status target_storage::deallocate(uint64_t offset, uint64_t length) noexcept {
  const uint64_t first = offset / block_size_, count = length / block_size_;
  if (mapping_ == nullptr) {
    allocated_->clear(first, count);
    std::memset(map_->data() + offset, 0, length);
    return status::success;
  }
  // Marked first: a write that comes after this punch allocates the blocks again.
  holes_->set(first, count);
  punched_.store(true);
  if (::fallocate(fd_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(length)) == 0)
    return status::success;
  if (errno == EOPNOTSUPP) {
    // A file system without hole punching: the zeros are written instead (the blocks stay
    // allocated, the range still reads back as zeros).
    static std::once_flag said;
    std::call_once(said, [this] {
      ZC_LOG_WARN("backing file {}: the file system cannot punch holes; discards write zeros",
                  path_);
    });
    std::memset(mapping_ + offset, 0, length);
    return status::success;
  }
  ZC_LOG_ERROR("backing file {}: cannot punch a hole of {} bytes at {}: {}", path_, length, offset,
               std::strerror(errno));
  return status::io_failed;
}

status target_storage::prepare_write(uint64_t offset, uint64_t length) noexcept {
  if (length == 0) return status::success;
  const uint64_t first = offset / block_size_;
  const uint64_t count = (offset + length - 1) / block_size_ - first + 1;
  if (mapping_ == nullptr) {
    allocated_->set(first, count);
    return status::success;
  }
  if (!holes_->any(first, count)) return status::success;
  const uint64_t from = first * block_size_;
  const uint64_t to = std::min<uint64_t>((first + count) * block_size_, mapping_length_);
  if (::fallocate(fd_.get(), 0, static_cast<off_t>(from), static_cast<off_t>(to - from)) != 0) {
    ZC_LOG_ERROR("backing file {}: write refused: cannot allocate {} bytes at {} (a hole): {}",
                 path_, to - from, from, std::strerror(errno));
    return status::io_failed;
  }
  holes_->clear(first, count);
  return status::success;
}

status target_storage::allocation_map(uint64_t first_block, std::span<uint8_t> bitmap) noexcept {
  std::memset(bitmap.data(), 0, bitmap.size());
  const uint64_t count = std::min<uint64_t>(bitmap.size() * 8, block_count_ - first_block);
  auto mark = [&bitmap](uint64_t i) { bitmap[i / 8] |= uint8_t(1u << (i % 8)); };
  if (mapping_ == nullptr) {
    for (uint64_t i = 0; i < count; ++i)
      if (allocated_->test(first_block + i)) mark(i);
    return status::success;
  }
  const uint64_t begin = first_block * block_size_;
  const uint64_t end = std::min<uint64_t>((first_block + count) * block_size_, mapping_length_);
  for (uint64_t at = begin; at < end;) {
    const off_t data = ::lseek(fd_.get(), static_cast<off_t>(at), SEEK_DATA);
    if (data < 0 && errno == ENXIO) break;  // no data from here to the end of the file
    const off_t hole = data < 0 ? data : ::lseek(fd_.get(), data, SEEK_HOLE);
    if (hole < 0) {
      ZC_LOG_ERROR("backing file {}: cannot search it for data at {}: {}", path_, at,
                   std::strerror(errno));
      return status::io_failed;
    }
    if (uint64_t(data) >= end) break;
    const uint64_t stop = std::min<uint64_t>(uint64_t(hole), end);
    for (uint64_t b = uint64_t(data) / block_size_; b * block_size_ < stop; ++b)
      mark(b - first_block);
    at = stop;
  }
  return status::success;
}

}  // namespace zc::target
