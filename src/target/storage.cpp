#include "target/storage.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
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

}  // namespace

std::unique_ptr<target_storage> target_storage::in_memory(uint64_t capacity) {
  std::unique_ptr<target_storage> s(new target_storage());
  // Zero-filled (the reference left it undefined).
  s->map_ = core::memory_map::allocate(capacity, core::access::local_read_write);
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
      auto s = in_memory(capacity);
      // Read straight into the storage: a staging copy would need twice its size in memory.
      if (content) content->read_into({s->map_->data(), capacity});
      return with_faults(std::move(s));
    }
    // Every block allocated now (holes of a sparse file included): on a full file system a write
    // into a hole of the mapping would kill the target with SIGBUS; this fails here instead, with
    // one line. Cheap where the file system has fallocate (extents marked unwritten).
    if (const int e = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(capacity)); e != 0) {
      errno = e;
      throw status_error(status::io_failed, os_error("cannot allocate backing file " + path));
    }
    void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED)
      throw status_error(status::no_memory, os_error("cannot map backing file " + path));
    std::unique_ptr<target_storage> s(new target_storage());
    s->path_ = path;
    s->fd_ = std::move(fd);
    s->mapping_ = static_cast<uint8_t*>(p);
    s->mapping_length_ = capacity;
    s->map_ = core::memory_map::wrap(p, capacity, core::access::local_read_write);
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
  if (::msync(mapping_, mapping_length_, MS_SYNC) != 0) {
    ZC_LOG_ERROR("flush of backing file {} failed: {}", path_, std::strerror(errno));
    return status::io_failed;
  }
  return status::success;
}

}  // namespace zc::target
