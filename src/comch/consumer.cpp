#include "comch/consumer.hpp"

#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>
#include <new>

#include "comch/internal/link.hpp"
#include "comch/internal/queue.hpp"
#include "comch/internal/unix_socket.hpp"
#include "core/log.hpp"

namespace zc::comch {
namespace {

uint32_t slots_for(uint32_t tasks) {
  uint32_t n = 2;
  while (n < tasks) n <<= 1;
  return n;
}

int dup_fd(int fd) {
  int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0)
    throw status_error(status::operating_system, "comch consumer: cannot dup a doorbell");
  return copy;
}

}  // namespace

consumer::consumer(core::progress_engine& engine, connection& conn, consumer_config config)
    : core::context(engine), link_(conn.link()), config_(std::move(config)) {
  if (config_.buffers == nullptr || config_.post_recv_tasks == 0)
    throw status_error(status::bad_config, "comch consumer needs a memory map and receive tasks");
  if (config_.post_recv_tasks > internal::max_queue_slots)
    throw status_error(status::bad_config, fmt::format("comch consumer: at most {} receive tasks",
                                                       internal::max_queue_slots));
  if (!has(config_.buffers->permissions(), core::access::pci_read_write))
    throw status_error(status::not_permitted,
                       "comch consumer receive memory needs access::pci_read_write");
  config_.buffers->export_pci();  // throws not_supported for memory a peer cannot map
  slot_count_ = slots_for(config_.post_recv_tasks);
  mask_ = slot_count_ - 1;
  posted_.assign(slot_count_, nullptr);
  data_bell_ = internal::make_doorbell();
  space_bell_ = internal::make_doorbell();
  if (data_bell_ < 0 || space_bell_ < 0) {
    internal::close_fd(data_bell_);
    internal::close_fd(space_bell_);
    throw status_error(status::operating_system, "comch consumer: cannot create doorbells");
  }
  pool_.configure(*this, config_.post_recv_tasks, config_.on_recv, config_.on_recv_error);
}

consumer::~consumer() {
  if (state() != core::context_state::idle) {
    ZC_SDK_LOG_ERROR("comch consumer {} destroyed while {}; stop it first", id_,
                     to_string(state()));
    revoke();  // at least no producer writes into memory the caller may free now
  }
  if (waker_added_) link_->remove_waker(data_bell_);
  engine().detach(*this);  // before our wait_fd closes
  internal::close_fd(data_bell_);
  internal::close_fd(space_bell_);
}

core::context_state consumer::on_start() {
  if (link_->closed())
    throw status_error(status::not_connected, "comch consumer: the connection is closed");
  queue_ = internal::shared_segment::create(internal::queue_bytes(slot_count_));
  id_ = link_->next_consumer_id();
  header_ = new (queue_.data()) internal::queue_header{};
  header_->magic = internal::queue_magic;
  header_->version = internal::queue_version;
  header_->slot_count = slot_count_;
  header_->consumer_id = id_;
  slots_ = internal::queue_slots(header_);
  for (uint32_t i = 0; i < slot_count_; ++i) {
    auto* s = new (&slots_[i]) internal::queue_slot{};
    s->seq.store(i, std::memory_order_relaxed);
  }
  tail_ = done_ = checked_ = claimed_end_ = 0;
  armed_ = false;
  peer_lied_ = false;
  stop_reason_ = status::shutdown;

  internal::outbox_frame announce;
  announce.type = internal::frame_type::consumer_new;
  const std::vector<uint8_t> blob = config_.buffers->export_pci();
  announce.payload = internal::encode(internal::consumer_new_payload{id_, slot_count_, blob});
  try {
    for (int fd : {queue_.fd(), data_bell_, space_bell_}) announce.fds.push_back(dup_fd(fd));
  } catch (...) {
    for (int fd : announce.fds) internal::close_fd(fd);
    throw;
  }
  link_->add_waker(data_bell_);
  waker_added_ = true;
  if (!ok(link_->post(std::move(announce)))) {
    link_->remove_waker(data_bell_);
    waker_added_ = false;
    throw status_error(status::not_connected, "comch consumer: the connection is closed");
  }
  ZC_SDK_LOG_DEBUG("comch consumer {} started ({} slots)", id_, slot_count_);
  return core::context_state::running;
}

consumer_post_recv_task* consumer::allocate_post_recv(core::buffer& buf) noexcept {
  consumer_post_recv_task* t = pool_.allocate();
  if (t != nullptr) t->buffer_ = &buf;
  return t;
}

status consumer::submit(consumer_post_recv_task& task) noexcept {
  if (state() != core::context_state::running) return status::bad_state;
  if (task.buffer_ == nullptr) return status::invalid_value;
  core::buffer& b = *task.buffer_;
  if (&b.map() != config_.buffers)
    return has(b.map().permissions(), core::access::pci_read_write) ? status::invalid_value
                                                                    : status::not_permitted;
  const uint64_t offset = static_cast<uint64_t>(b.tail() - config_.buffers->data());
  const uint64_t capacity = b.tail_room();

  const uint64_t position = tail_;
  internal::queue_slot& s = slots_[position & mask_];
  posted_[position & mask_] = &task;
  s.offset.store(offset, std::memory_order_relaxed);
  s.capacity.store(capacity, std::memory_order_relaxed);
  s.length.store(0, std::memory_order_relaxed);
  s.seq.store(position + 1, std::memory_order_release);
  tail_ = position + 1;
  header_->posted.store(tail_, std::memory_order_release);  // producers may claim it now
  task_submitted();
  return status::success;
}

void consumer::wake_starved_producers() noexcept {
  if (checked_ == tail_) return;
  checked_ = tail_;
  // Dekker with producer::arm() (its seq_cst flag store, then its `posted` load): our `posted`
  // stores in submit(), this fence, then the flag load. Either it saw these buffers or we see its
  // flag. Once per poll round (and before sleeping), not per post: a producer that starved
  // meanwhile waits at most until our next round.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (header_->producers_starved.load(std::memory_order_seq_cst) != 0 &&
      header_->producers_starved.exchange(0) != 0)
    internal::ring(space_bell_);
}

consumer::fill consumer::deliver(uint64_t position) noexcept {
  internal::queue_slot& s = slots_[position & mask_];
  if (s.seq.load(std::memory_order_acquire) != position + 2) return fill::pending;
  const uint64_t length = s.length.load(std::memory_order_relaxed);
  consumer_post_recv_task& task = *posted_[position & mask_];
  core::buffer& b = *task.buffer_;
  // The length comes from the peer: check it against the room this buffer was posted with, not
  // as a sum that a huge length wraps around.
  if (length > b.tail_room()) {
    task.received_ = 0;
    complete(task, status::invalid_value);
    return fill::lie;
  }
  task.received_ = length;
  b.append(length);
  complete(task, status::success);
  return fill::delivered;
}

void consumer::distrust_peer(const char* lie) noexcept {
  if (!peer_lied_)
    ZC_SDK_LOG_ERROR("comch consumer {}: the peer wrote {} into the queue; failing the consumer",
                     id_, lie);
  peer_lied_ = true;
  stop_reason_ = status::invalid_value;
}

size_t consumer::poll() {
  if (armed_) {
    armed_ = false;
    if (header_ != nullptr) header_->consumer_sleeping.store(0, std::memory_order_relaxed);
  }
  if (bell_rang_) {
    bell_rang_ = false;
    internal::drain(data_bell_);
  }
  if (state() == core::context_state::stopping) return settle_claims();
  if (state() != core::context_state::running) return 0;
  if (link_->closed()) {
    stop_reason_ = status::connection_reset;
    stop();
    return 1;
  }
  wake_starved_producers();  // for what the callbacks of the last round re-posted
  size_t delivered = 0;
  while (done_ != tail_) {
    const fill f = deliver(done_);
    if (f == fill::pending) break;
    ++done_;
    ++delivered;
    if (f == fill::lie) {
      distrust_peer("a fill longer than its buffer");
      stop();
      break;
    }
  }
  return delivered;
}

size_t consumer::settle_claims() noexcept {
  size_t settled = 0;
  while (done_ < claimed_end_) {
    const fill f = deliver(done_);
    if (f == fill::lie) distrust_peer("a fill longer than its buffer");
    if (f == fill::pending) {
      // Its producer may still be copying into the buffer: wait for it, unless it is gone.
      if (!peer_lied_ && !link_->closed()) break;
      complete(*posted_[done_ & mask_],
               peer_lied_ ? status::invalid_value : status::connection_reset);
    }
    ++done_;
    ++settled;
  }
  if (done_ == claimed_end_ && waker_added_) {
    link_->remove_waker(data_bell_);
    waker_added_ = false;
  }
  return settled;
}

bool consumer::arm() {
  armed_ = true;  // poll() clears the sleeping flag after any sleep
  if (state() == core::context_state::stopping) {
    // The link rings our doorbell if the peer goes; a producer rings it when it fills.
    if (done_ == claimed_end_) return true;
    if (peer_lied_ || link_->closed()) return false;
  } else {
    if (state() != core::context_state::running) return true;
    wake_starved_producers();  // never sleep while a producer waits for buffers we posted
    if (done_ == tail_) return true;
    if (link_->closed()) return false;
  }
  // Dekker with producer::submit() (its fill, then its flag load), all seq_cst.
  header_->consumer_sleeping.store(1, std::memory_order_seq_cst);
  return slots_[done_ & mask_].seq.load(std::memory_order_seq_cst) != done_ + 2;
}

uint64_t consumer::revoke() noexcept {
  if (header_ == nullptr) return tail_;
  header_->closed.store(1, std::memory_order_seq_cst);
  uint64_t head = header_->head.load(std::memory_order_acquire);
  // Strong CAS: each failure is a producer's claim, and there are at most tail_ - head of those;
  // more means someone else is writing the head.
  for (uint64_t tries = 0; head < tail_; ++tries) {
    if (header_->head.compare_exchange_strong(head, tail_, std::memory_order_acq_rel)) break;
    if (tries > slot_count_) {
      distrust_peer("a head that keeps moving");
      break;
    }
  }
  internal::ring(space_bell_);  // producers waiting for a buffer learn that none will come
  // Producers claim posted positions in order, and we deliver only claimed ones: an honest head
  // is in [done_, tail_].
  if (head > tail_ || head < done_) distrust_peer("a head no producer could have left");
  return peer_lied_ ? done_ : head;
}

void consumer::on_stop() {
  claimed_end_ = revoke();
  for (uint64_t p = claimed_end_; p < tail_; ++p) complete(*posted_[p & mask_], stop_reason_);
  tail_ = claimed_end_;
  settle_claims();
  if (!link_->closed()) {
    internal::outbox_frame expired;
    expired.type = internal::frame_type::consumer_expired;
    expired.payload = internal::encode(internal::consumer_expired_payload{id_});
    link_->post(std::move(expired));
  }
  ZC_SDK_LOG_DEBUG("comch consumer {} stopped ({}); {} buffer(s) still claimed", id_,
                   status_name(stop_reason_), claimed_end_ - done_);
}

}  // namespace zc::comch
