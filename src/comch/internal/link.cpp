#include "comch/internal/link.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <utility>

#include "comch/internal/unix_socket.hpp"

namespace zc::comch::internal {

std::shared_ptr<remote_consumer> remote_consumer::attach(uint32_t id, uint32_t slot_count,
                                                         int queue_fd,
                                                         std::shared_ptr<core::memory_map> buffers,
                                                         int data_bell, int space_bell) {
  std::shared_ptr<remote_consumer> rc;
  try {
    rc.reset(new remote_consumer());
  } catch (...) {
    for (int fd : {queue_fd, data_bell, space_bell}) close_fd(fd);
    throw;
  }
  // Owned from here, so that every throw below closes them.
  rc->data_bell_ = data_bell;
  rc->space_bell_ = space_bell;
  rc->id_ = id;
  if (!valid_slot_count(slot_count)) {
    close_fd(queue_fd);
    throw status_error(status::invalid_value,
                       fmt::format("consumer {} announced a queue of {} slots", id, slot_count));
  }
  rc->queue_ = shared_segment::map(queue_fd, queue_bytes(slot_count));
  if (!buffers || !has(buffers->permissions(), core::access::pci_read_write))
    throw status_error(status::not_permitted,
                       fmt::format("consumer {} receive memory is not PCI writable", id));
  rc->header_ = reinterpret_cast<queue_header*>(rc->queue_.data());
  if (rc->header_->magic != queue_magic || rc->header_->version != queue_version ||
      rc->header_->slot_count != slot_count || rc->header_->consumer_id != id)
    throw status_error(status::invalid_value,
                       fmt::format("consumer {} queue does not match its announcement", id));
  rc->slots_ = queue_slots(rc->header_);
  rc->mask_ = slot_count - 1;
  rc->buffer_map_ = std::move(buffers);
  rc->buffer_base_ = rc->buffer_map_->data();
  rc->buffer_size_ = rc->buffer_map_->size();
  return rc;
}

remote_consumer::~remote_consumer() {
  close_fd(data_bell_);
  close_fd(space_bell_);
}

link::link(int mailbox) : mailbox_(fcntl(mailbox, F_DUPFD_CLOEXEC, 0)) {
  if (mailbox_ < 0) throw status_error(status::operating_system, "comch: cannot dup mailbox");
}

link::~link() {
  for (auto& f : outbox_)
    for (int fd : f.fds) close_fd(fd);
  close_fd(mailbox_);
}

status link::post(outbox_frame frame) {
  bool queued = false;
  {
    std::lock_guard lock(mutex_);
    if (!closed()) {
      outbox_.push_back(std::move(frame));
      queued = true;
    }
  }
  if (!queued) {
    for (int fd : frame.fds) close_fd(fd);
    return status::not_connected;
  }
  ring(mailbox_);
  return status::success;
}

void link::add_waker(int fd) {
  std::lock_guard lock(mutex_);
  wakers_.push_back(fd);
}

void link::remove_waker(int fd) noexcept {
  std::lock_guard lock(mutex_);
  std::erase(wakers_, fd);
}

std::shared_ptr<remote_consumer> link::find(uint32_t id) {
  std::lock_guard lock(mutex_);
  auto it = remotes_.find(id);
  return it == remotes_.end() ? nullptr : it->second;
}

std::vector<outbox_frame> link::take_outbox() {
  std::lock_guard lock(mutex_);
  return std::exchange(outbox_, {});
}

void link::add_remote(std::shared_ptr<remote_consumer> consumer) {
  std::lock_guard lock(mutex_);
  uint32_t id = consumer->id();
  remotes_.emplace(id, std::move(consumer));  // never replaces: the first announcement stays
}

size_t link::remote_count() {
  std::lock_guard lock(mutex_);
  return remotes_.size();
}

bool link::expire_remote(uint32_t id) {
  std::lock_guard lock(mutex_);
  auto it = remotes_.find(id);
  if (it == remotes_.end()) return false;
  it->second->expired.store(true, std::memory_order_release);
  remotes_.erase(it);
  return true;
}

std::shared_ptr<core::memory_map> link::import_buffers(std::span<const uint8_t> blob) {
  std::vector<uint8_t> key(blob.begin(), blob.end());
  {
    std::lock_guard lock(mutex_);
    if (auto it = imported_buffers_.find(key); it != imported_buffers_.end())
      if (auto map = it->second.lock()) return map;
  }
  std::shared_ptr<core::memory_map> map = core::memory_map::import_pci(blob);
  std::lock_guard lock(mutex_);
  std::erase_if(imported_buffers_, [](const auto& entry) { return entry.second.expired(); });
  imported_buffers_[std::move(key)] = map;
  return map;
}

std::vector<uint32_t> link::close() {
  std::vector<uint32_t> ids;
  std::lock_guard lock(mutex_);
  if (closed_.exchange(true, std::memory_order_acq_rel)) return ids;
  for (auto& [id, consumer] : remotes_) {
    consumer->expired.store(true, std::memory_order_release);
    ids.push_back(id);
  }
  remotes_.clear();
  for (auto& f : outbox_)
    for (int fd : f.fds) close_fd(fd);
  outbox_.clear();
  for (int fd : wakers_) ring(fd);
  return ids;
}

}  // namespace zc::comch::internal
