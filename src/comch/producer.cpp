#include "comch/producer.hpp"

#include <fmt/format.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cstring>

#include "comch/internal/link.hpp"
#include "comch/internal/queue.hpp"
#include "comch/internal/unix_socket.hpp"
#include "core/log.hpp"

namespace zc::comch {
namespace {

// Claim attempts per submit, over the consumer's slot count. Each failed one is another
// producer's claim; past this many, the head is being moved by someone who does not claim (or
// the queue is that contended): answer again rather than spin in the caller's submit().
constexpr uint64_t claim_rounds = 2;

// Whether a published buffer is still unclaimed: positions below head are claimed, positions
// below posted are published.
bool has_posted_buffer(internal::remote_consumer& rc) noexcept {
  return rc.header().head.load(std::memory_order_seq_cst) <
         rc.header().posted.load(std::memory_order_seq_cst);
}

}  // namespace

producer::producer(core::progress_engine& engine, connection& conn, producer_config config)
    : core::context(engine), link_(conn.link()), config_(std::move(config)) {
  if (config_.send_tasks == 0)
    throw status_error(status::bad_config, "comch producer needs send tasks");
  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  wake_ = internal::make_doorbell();
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  if (epoll_ < 0 || wake_ < 0 || epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev) != 0) {
    internal::close_fd(epoll_);
    internal::close_fd(wake_);
    throw status_error(status::operating_system, "comch producer: cannot create epoll/eventfd");
  }
  known_.reserve(4);
  starved_.reserve(4);
  pool_.configure(*this, config_.send_tasks, config_.on_send_done, config_.on_send_error);
}

producer::~producer() {
  if (state() != core::context_state::idle)
    ZC_SDK_LOG_ERROR("comch producer destroyed while {}; stop it first", to_string(state()));
  if (waker_added_) link_->remove_waker(wake_);
  engine().detach(*this);  // before our wait_fd closes
  while (!known_.empty()) forget(known_.size() - 1);
  internal::close_fd(epoll_);
  internal::close_fd(wake_);
}

core::context_state producer::on_start() {
  if (link_->closed())
    throw status_error(status::not_connected, "comch producer: the connection is closed");
  link_->add_waker(wake_);
  waker_added_ = true;
  return core::context_state::running;
}

void producer::on_stop() {
  if (waker_added_) {
    link_->remove_waker(wake_);
    waker_added_ = false;
  }
  starved_.clear();
  while (!known_.empty()) forget(known_.size() - 1);
}

producer_send_task* producer::allocate_send(core::buffer& buf, uint32_t consumer_id) noexcept {
  producer_send_task* t = pool_.allocate();
  if (t != nullptr) t->set(buf, consumer_id);
  return t;
}

producer::known_consumer* producer::lookup(uint32_t id) noexcept {
  size_t index = known_.size();
  if (last_ < known_.size() && known_[last_].id == id) {
    index = last_;
  } else {
    for (size_t i = 0; i < known_.size(); ++i)
      if (known_[i].id == id) index = i;
  }
  if (index == known_.size()) {
    // First send to this consumer: the one lock, on the link's table.
    try {
      auto rc = link_->find(id);
      if (!rc) return nullptr;
      known_.push_back({id, std::move(rc), false});
    } catch (...) {
      return nullptr;
    }
  }
  internal::remote_consumer& rc = *known_[index].consumer;
  if (rc.expired.load(std::memory_order_acquire) || rc.lied.load(std::memory_order_acquire) ||
      rc.header().closed.load(std::memory_order_acquire) != 0) {
    forget(index);
    return nullptr;
  }
  last_ = index;
  return &known_[index];
}

void producer::forget(size_t index) noexcept {
  known_consumer& k = known_[index];
  std::erase(starved_, k.consumer.get());
  if (k.watched) epoll_ctl(epoll_, EPOLL_CTL_DEL, k.consumer->space_bell(), nullptr);
  known_.erase(known_.begin() + static_cast<std::ptrdiff_t>(index));
  last_ = 0;
}

void producer::starve(internal::remote_consumer& rc) noexcept {
  if (std::find(starved_.begin(), starved_.end(), &rc) != starved_.end()) return;
  for (auto& k : known_) {
    if (k.consumer.get() != &rc || k.watched) continue;
    // Edge-triggered: the consumer never reads its space doorbell, so every ring is an edge that
    // reaches every producer waiting on it.
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    ev.data.ptr = &rc;
    k.watched = epoll_ctl(epoll_, EPOLL_CTL_ADD, rc.space_bell(), &ev) == 0;
  }
  try {
    starved_.push_back(&rc);
  } catch (...) {
  }
}

status producer::submit(producer_send_task& task) noexcept {
  if (state() != core::context_state::running) return status::bad_state;
  if (task.buffer_ == nullptr) return status::invalid_value;
  known_consumer* known = lookup(task.consumer_id_);
  if (known == nullptr) return status::not_found;
  internal::remote_consumer* rc = known->consumer.get();
  internal::queue_header& header = rc->header();
  const core::buffer& b = *task.buffer_;
  const uint64_t length = b.data_length();

  uint64_t position = header.head.load(std::memory_order_relaxed);
  const uint64_t max_attempts = claim_rounds * (rc->slot_mask() + 1);
  for (uint64_t attempt = 0;; ++attempt) {
    if (attempt == max_attempts) {
      starve(*rc);
      return status::again;
    }
    if (position >= known->posted) {
      known->posted = header.posted.load(std::memory_order_acquire);
      if (position >= known->posted) {
        starve(*rc);  // the consumer has not posted this position (yet)
        return status::again;
      }
    }
    internal::queue_slot& s = rc->slot(position);
    const uint64_t seq = s.seq.load(std::memory_order_acquire);
    if (seq != position + 1) {
      // Published, so another producer has claimed it (or a lying peer): read the head again.
      const uint64_t now = header.head.load(std::memory_order_relaxed);
      if (now == position) {
        starve(*rc);
        return status::again;
      }
      position = now;
      continue;
    }
    const uint64_t offset = s.offset.load(std::memory_order_relaxed);
    const uint64_t capacity = s.capacity.load(std::memory_order_relaxed);
    const bool outside = offset > rc->buffers_size() || capacity > rc->buffers_size() - offset;
    if (length > capacity || outside) {
      // Refused without claiming: the buffer stays posted for the next message. Re-check that
      // what we read still describes the position at the head.
      std::atomic_thread_fence(std::memory_order_acquire);
      const uint64_t now = header.head.load(std::memory_order_relaxed);
      if (now != position) {
        position = now;
        continue;
      }
      if (outside && !rc->lied.exchange(true))
        ZC_SDK_LOG_ERROR(
            "comch consumer {} posted a buffer outside its memory; not sending to it "
            "again",
            rc->id());
      task_submitted();
      complete(task, outside ? status::invalid_value : status::too_big);
      return status::success;
    }
    if (!header.head.compare_exchange_weak(position, position + 1, std::memory_order_acq_rel,
                                           std::memory_order_relaxed))
      continue;
    if (length != 0) std::memcpy(rc->buffers() + offset, b.data(), length);
    s.length.store(length, std::memory_order_relaxed);
    // Dekker with consumer::arm() (its flag store, then its slot load): with both sides seq_cst,
    // either it sees this fill or we see its flag. The exchange is the publish and the full
    // barrier in one locked instruction.
    s.seq.exchange(position + 2, std::memory_order_seq_cst);
    if (header.consumer_sleeping.load(std::memory_order_seq_cst) != 0 &&
        header.consumer_sleeping.exchange(0) != 0)
      internal::ring(rc->data_bell());
    task_submitted();
    complete(task, status::success);
    if (!starved_.empty()) std::erase(starved_, rc);
    return status::success;
  }
}

size_t producer::poll() {
  if (bell_rang_) {
    bell_rang_ = false;
    epoll_event events[16];
    int n;
    // Empties the ready list. Which doorbell rang does not matter: one ring may answer another
    // producer's request, so starved_ is only trimmed by arm() (space seen) and by sends.
    do {
      n = epoll_wait(epoll_, events, 16, 0);
    } while (n == 16);
    internal::drain(wake_);
  }
  if (state() == core::context_state::running && link_->closed()) {
    stop();
    return 1;
  }
  return 0;
}

bool producer::arm() {
  if (state() != core::context_state::running || starved_.empty()) return true;
  if (link_->closed()) return false;
  // Dekker with consumer::submit() (its slot publish, then its flag load), all seq_cst.
  for (auto* rc : starved_) rc->header().producers_starved.store(1, std::memory_order_seq_cst);
  // Consumers that have a buffer again (or are gone) need no doorbell: do not sleep, let the
  // application retry.
  const size_t before = starved_.size();
  std::erase_if(starved_, [](internal::remote_consumer* rc) {
    return has_posted_buffer(*rc) || rc->header().closed.load(std::memory_order_relaxed) != 0 ||
           rc->expired.load(std::memory_order_relaxed);
  });
  return starved_.size() == before;
}

}  // namespace zc::comch
