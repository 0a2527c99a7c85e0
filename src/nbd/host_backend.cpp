#include "nbd/host_backend.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/log.hpp"

namespace zc::nbd {

using storage::io_message_type;

// What the server holds is the io part; the backend gets back to the rest with a static_cast.
struct host_backend::host_io : io {
  lane* owner = nullptr;
  std::vector<uint32_t> slots;          // of owner's worker, one per IO message, in order
  std::vector<block_runs::run> memory;  // the blocks of each message (none for a flush)
  std::vector<iovec> vecs;
  uint32_t pending = 0;  // messages not yet completed (worker thread)
  status error = status::success;
};

struct host_backend::lane {
  lane(uint32_t slices, uint32_t blocks_per_slice) : blocks(slices, blocks_per_slice) {}
  host::worker* worker = nullptr;
  uint64_t region_base = 0;          // this worker's first slice
  std::vector<uint32_t> free_slots;  // server thread
  block_runs blocks;                 // server thread: its IO memory, block by block
  std::vector<host_io*> owner;       // slot -> its io; written before the io is queued
  std::mutex inbox_mutex;
  std::vector<host_io*> inbox;  // under inbox_mutex
  std::vector<host_io*> running;
  bool posted = false;  // under inbox_mutex: a job that drains the inbox is on its way
};

uint32_t host_backend::slice_size(uint64_t capacity, uint32_t block_size) {
  const uint64_t blocks =
      std::max<uint64_t>(1, std::min<uint64_t>(max_blocks_per_message, capacity / block_size));
  return static_cast<uint32_t>(blocks * block_size);
}

uint64_t host_backend::region_size(const host_backend_options& o, uint32_t workers) {
  return uint64_t(slice_size(o.capacity, o.block_size)) * o.slots_per_worker * workers;
}

host_backend::host_backend(host::session& session, host_backend_options options)
    : session_(session), options_(options) {
  if (options_.block_size == 0 || options_.capacity < options_.block_size ||
      options_.slots_per_worker == 0 || session_.workers().empty())
    throw status_error(status::invalid_value, "the NBD backend needs storage, slots and workers");
  slice_ = slice_size(options_.capacity, options_.block_size);
  // One request takes at most half of one worker's memory and IO messages, so that no request
  // (and no client, which the server holds to its share) waits for all of them.
  const uint64_t half =
      std::max<uint64_t>(uint64_t(slice_) * options_.slots_per_worker / 2, slice_);
  max_io_ = static_cast<uint32_t>(std::min<uint64_t>(max_request_size, half));
  max_io_ -= max_io_ % options_.block_size;
  const uint32_t pieces = (max_io_ + slice_ - 1) / slice_;
  if (session_.region().size() < region_size(options_, uint32_t(session_.workers().size())))
    throw status_error(status::invalid_value, "the IO region is smaller than the NBD slots");
  done_fd_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!done_fd_)
    throw status_error(status::operating_system, fmt::format("eventfd: {}", std::strerror(errno)));

  uint64_t base = 0;
  for (auto& w : session_.workers()) {
    auto l = std::make_unique<lane>(options_.slots_per_worker, slice_ / options_.block_size);
    l->worker = w.get();
    l->region_base = base;
    base += uint64_t(slice_) * options_.slots_per_worker;
    l->owner.assign(options_.slots_per_worker, nullptr);
    for (uint32_t s = options_.slots_per_worker; s-- > 0;) l->free_slots.push_back(s);
    l->inbox.reserve(options_.slots_per_worker);
    l->running.reserve(options_.slots_per_worker);
    lanes_.push_back(std::move(l));
  }
  const size_t total = size_t(options_.slots_per_worker) * lanes_.size();
  ios_.reserve(total);
  for (size_t i = 0; i < total; ++i) {
    auto h = std::make_unique<host_io>();
    h->slots.reserve(pieces);
    h->memory.reserve(pieces);
    h->vecs.reserve(pieces);
    free_ios_.push_back(h.get());
    ios_.push_back(std::move(h));
  }
  done_.reserve(total);  // complete() runs on worker threads and must not allocate
  for (auto& l : lanes_) {
    lane* lp = l.get();
    lp->worker->thread().call([this, lp] {
      lp->worker->queue()->set_on_complete(
          [this, lp](uint32_t slot, status result) { on_complete(*lp, slot, result); });
    });
  }
}

host_backend::~host_backend() {
  for (auto& l : lanes_) {
    lane* lp = l.get();
    // Also runs after every job this backend posted: none is left to find it gone.
    try {
      lp->worker->thread().call([lp] { lp->worker->queue()->set_on_complete(nullptr); });
    } catch (const status_error& e) {
      ZC_LOG_ERROR("nbd backend: {}", e.what());
    }
  }
}

uint64_t host_backend::memory() const noexcept {
  return uint64_t(slice_) * options_.slots_per_worker * lanes_.size();
}

uint32_t host_backend::slots() const noexcept {
  return options_.slots_per_worker * static_cast<uint32_t>(lanes_.size());
}

uint32_t host_backend::slots_for(uint32_t length) const noexcept {
  return length == 0 ? 1 : (length + slice_ - 1) / slice_;
}

// An IO message per slice's worth of bytes, each with its own run of blocks in one slice of the
// worker's memory; all of one worker.
io* host_backend::acquire(uint32_t length) noexcept {
  if (length > max_io_ || free_ios_.empty()) return nullptr;
  const uint32_t pieces = slots_for(length);
  for (size_t k = 0; k < lanes_.size(); ++k) {
    lane& l = *lanes_[(next_lane_ + k) % lanes_.size()];
    if (l.free_slots.size() < pieces) continue;
    host_io* h = free_ios_.back();
    h->memory.clear();
    h->vecs.clear();
    for (uint32_t left = length; left != 0;) {
      const uint32_t n = std::min(left, slice_);
      const auto run = l.blocks.take((n + options_.block_size - 1) / options_.block_size);
      if (!run) break;
      h->memory.push_back(*run);
      h->vecs.push_back({session_.region().data() + address(l, *run), n});
      left -= n;
    }
    if (length != 0 && h->memory.size() != pieces) {  // not in this worker's memory now
      for (const auto& r : h->memory) l.blocks.give_back(r);
      continue;
    }
    free_ios_.pop_back();
    next_lane_ = (next_lane_ + k + 1) % lanes_.size();
    h->owner = &l;
    h->slots.clear();
    for (uint32_t i = 0; i < pieces; ++i) {
      const uint32_t slot = l.free_slots.back();
      l.free_slots.pop_back();
      l.owner[slot] = h;
      h->slots.push_back(slot);
    }
    static_cast<io&>(*h) = io{};
    h->length = length;
    h->segments = h->vecs;
    return h;
  }
  return nullptr;
}

uint64_t host_backend::address(const lane& l, const block_runs::run& r) const noexcept {
  return l.region_base + uint64_t(r.slice) * slice_ + uint64_t(r.first) * options_.block_size;
}

void host_backend::submit(io& x) noexcept {
  auto& h = static_cast<host_io&>(x);
  lane& l = *h.owner;
  h.pending = static_cast<uint32_t>(h.slots.size());
  h.error = status::success;
  bool post = false;
  {
    std::lock_guard lock(l.inbox_mutex);
    l.inbox.push_back(&h);
    post = !l.posted;
    l.posted = true;
  }
  if (post) {
    try {
      l.worker->thread().post([this, lp = &l] { run_inbox(*lp); });
    } catch (...) {  // no memory for the job: the io fails rather than hangs
      {
        std::lock_guard lock(l.inbox_mutex);
        l.posted = false;
        std::erase(l.inbox, &h);
      }
      h.pending = 0;
      h.error = status::no_memory;
      complete(h);
    }
  }
}

namespace {
io_message_type message_type(io_kind k) noexcept {
  switch (k) {
    case io_kind::read:
      return io_message_type::read;
    case io_kind::write:
    case io_kind::write_zeroes:
      return io_message_type::write;
    case io_kind::flush:
      return io_message_type::flush;
    case io_kind::discard:
      return io_message_type::discard;
    case io_kind::zero_range:
      return io_message_type::write_zeroes;
    case io_kind::allocation_map:
      return io_message_type::allocation_map;
  }
  return io_message_type::flush;
}
}  // namespace

// On the worker's thread: sends the IO messages of every io queued for it.
void host_backend::run_inbox(lane& l) noexcept {
  {
    std::lock_guard lock(l.inbox_mutex);
    l.running.swap(l.inbox);
    l.posted = false;
  }
  host::io_queue& q = *l.worker->queue();
  for (host_io* h : l.running) {
    const io& x = *h;
    const auto type = message_type(x.kind);
    // Zeroes are written as data until the targets take a zeroing message (DESIGN §2, type 5),
    // and made here, on the worker's thread, not on the server's.
    if (x.kind == io_kind::write_zeroes)
      for (const iovec& v : h->vecs) std::memset(v.iov_base, 0, v.iov_len);
    const uint32_t pieces = static_cast<uint32_t>(h->slots.size());
    for (uint32_t i = 0; i < pieces; ++i) {
      const uint32_t slot = h->slots[i];
      host::io_request r{.type = type};
      if (x.kind == io_kind::discard || x.kind == io_kind::zero_range) {
        r.io_size = x.extent;  // no data moves: nothing of the region is named
        r.storage_offset = x.offset;
      } else if (type != io_message_type::flush) {
        r.io_size = static_cast<uint32_t>(h->vecs[i].iov_len);
        r.requester_offset = address(l, h->memory[i]);
        r.storage_offset = x.offset + uint64_t(i) * slice_;
      }
      if (status s = q.submit(slot, r); !ok(s)) on_complete(l, slot, s);
    }
  }
  l.running.clear();
}

// On the worker's thread.
void host_backend::on_complete(lane& l, uint32_t slot, status result) noexcept {
  if (slot >= l.owner.size() || l.owner[slot] == nullptr) return;
  host_io& h = *l.owner[slot];
  if (!ok(result) && ok(h.error)) h.error = result;
  if (h.pending == 0 || --h.pending != 0) return;
  complete(h);
}

// Signals the eventfd only when the queue was empty: take_completions() reads the eventfd before
// it takes the queue, so whatever is queued after that read is either taken with the rest or
// signalled again.
void host_backend::complete(host_io& h) noexcept {
  bool was_empty;
  {
    std::lock_guard lock(done_mutex_);
    was_empty = done_.empty();
    done_.push_back(&h);
  }
  if (!was_empty) return;
  const uint64_t one = 1;
  (void)!::write(done_fd_.get(), &one, sizeof one);
}

void host_backend::take_completions(std::vector<io*>& out) {
  uint64_t v;
  (void)!::read(done_fd_.get(), &v, sizeof v);
  std::lock_guard lock(done_mutex_);
  for (host_io* h : done_) {
    h->result = h->error;
    out.push_back(h);
  }
  done_.clear();
}

void host_backend::release(io& x) noexcept {
  auto& h = static_cast<host_io&>(x);
  lane& l = *h.owner;
  for (uint32_t slot : h.slots) {
    l.owner[slot] = nullptr;
    l.free_slots.push_back(slot);
  }
  for (const auto& r : h.memory) l.blocks.give_back(r);
  h.slots.clear();
  h.memory.clear();
  free_ios_.push_back(&h);
}

}  // namespace zc::nbd
