#include "nbd/host_backend.hpp"

#include <algorithm>
#include <cstring>

#include "core/log.hpp"

namespace zc::nbd {

using storage::io_message_type;

// What the server holds is the io part; the backend gets back to the rest with a static_cast.
struct host_backend::host_io : io {
  std::vector<uint32_t> slots;          // one per IO message, in order
  std::vector<block_runs::run> memory;  // the blocks of each message (none for a flush)
  std::vector<iovec> vecs;
  uint32_t pending = 0;  // messages not yet completed
  status error = status::success;
};

uint32_t host_backend::slice_size(uint64_t capacity, uint32_t block_size) {
  const uint64_t blocks =
      std::max<uint64_t>(1, std::min<uint64_t>(max_blocks_per_message, capacity / block_size));
  return static_cast<uint32_t>(blocks * block_size);
}

uint64_t host_backend::region_size(const host_backend_options& o, uint32_t workers) {
  return uint64_t(slice_size(o.capacity, o.block_size)) * o.slots_per_worker * workers;
}

namespace {
uint32_t checked_slice(const host_backend_options& o) {
  if (o.block_size == 0 || o.capacity < o.block_size || o.slots_per_worker == 0)
    throw status_error(status::invalid_value, "the NBD backend needs storage and slots");
  return host_backend::slice_size(o.capacity, o.block_size);
}
}  // namespace

host_backend::host_backend(host::session& session, host_backend_options options)
    : session_(session),
      options_(std::move(options)),
      slice_(checked_slice(options_)),
      blocks_(options_.slots_per_worker, slice_ / options_.block_size) {
  const auto workers = static_cast<uint32_t>(session_.workers().size());
  if (options_.worker >= workers)
    throw status_error(status::invalid_value, "the NBD backend's worker does not exist");
  if (session_.region().size() < region_size(options_, workers))
    throw status_error(status::invalid_value, "the IO region is smaller than the NBD slots");
  worker_ = session_.workers()[options_.worker].get();
  engine_ = &worker_->thread().engine();
  // One request takes at most half of the worker's memory and IO messages, so that no request
  // (and no client, which the server holds to its share) waits for all of them.
  const uint64_t half =
      std::max<uint64_t>(uint64_t(slice_) * options_.slots_per_worker / 2, slice_);
  max_io_ = static_cast<uint32_t>(std::min<uint64_t>(max_request_size, half));
  max_io_ -= max_io_ % options_.block_size;
  const uint32_t pieces = (max_io_ + slice_ - 1) / slice_;
  region_base_ = uint64_t(slice_) * options_.slots_per_worker * options_.worker;
  owner_.assign(options_.slots_per_worker, nullptr);
  for (uint32_t s = options_.slots_per_worker; s-- > 0;) free_slots_.push_back(s);
  ios_.reserve(options_.slots_per_worker);
  for (uint32_t i = 0; i < options_.slots_per_worker; ++i) {
    auto h = std::make_unique<host_io>();
    h->slots.reserve(pieces);
    h->memory.reserve(pieces);
    h->vecs.reserve(pieces);
    free_ios_.push_back(h.get());
    ios_.push_back(std::move(h));
  }
  done_.reserve(options_.slots_per_worker);  // complete() must not allocate
  worker_->thread().call([this] {
    worker_->queue()->set_on_complete(
        [this](uint32_t slot, status result) { on_complete(slot, result); });
  });
}

host_backend::~host_backend() {
  try {
    worker_->thread().call([this] { worker_->queue()->set_on_complete(nullptr); });
  } catch (const status_error& e) {
    ZC_LOG_ERROR("nbd backend: {}", e.what());
  }
}

uint64_t host_backend::memory() const noexcept {
  return uint64_t(slice_) * options_.slots_per_worker;
}

uint32_t host_backend::slots_for(uint32_t length) const noexcept {
  return length == 0 ? 1 : (length + slice_ - 1) / slice_;
}

// An IO message per slice's worth of bytes, each with its own run of blocks in one slice.
io* host_backend::acquire(uint32_t length) noexcept {
  const uint32_t pieces = slots_for(length);
  if (length > max_io_ || free_ios_.empty() || free_slots_.size() < pieces) return nullptr;
  host_io* h = free_ios_.back();
  h->memory.clear();
  h->vecs.clear();
  for (uint32_t left = length; left != 0;) {
    const uint32_t n = std::min(left, slice_);
    const auto run = blocks_.take((n + options_.block_size - 1) / options_.block_size);
    if (!run) break;
    h->memory.push_back(*run);
    h->vecs.push_back({session_.region().data() + address(*run), n});
    left -= n;
  }
  if (length != 0 && h->memory.size() != pieces) {  // not in the worker's memory now
    for (const auto& r : h->memory) blocks_.give_back(r);
    return nullptr;
  }
  free_ios_.pop_back();
  h->slots.clear();
  for (uint32_t i = 0; i < pieces; ++i) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    owner_[slot] = h;
    h->slots.push_back(slot);
  }
  static_cast<io&>(*h) = io{};
  h->length = length;
  h->segments = h->vecs;
  return h;
}

uint64_t host_backend::address(const block_runs::run& r) const noexcept {
  return region_base_ + uint64_t(r.slice) * slice_ + uint64_t(r.first) * options_.block_size;
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

// One IO message per piece of the io, sent at once on this (the worker's) thread.
void host_backend::submit(io& x) noexcept {
  auto& h = static_cast<host_io&>(x);
  h.pending = static_cast<uint32_t>(h.slots.size());
  h.error = status::success;
  const auto type = message_type(x.kind);
  // Zeroes written as data: the memory is zeroed here, where the data would have been copied.
  if (x.kind == io_kind::write_zeroes)
    for (const iovec& v : h.vecs) std::memset(v.iov_base, 0, v.iov_len);
  host::io_queue& q = *worker_->queue();
  const uint32_t pieces = static_cast<uint32_t>(h.slots.size());
  for (uint32_t i = 0; i < pieces; ++i) {
    const uint32_t slot = h.slots[i];
    host::io_request r{.type = type};
    if (x.kind == io_kind::discard || x.kind == io_kind::zero_range) {
      r.io_size = x.extent;  // no data moves: nothing of the region is named
      r.storage_offset = x.offset;
    } else if (type != io_message_type::flush) {
      r.io_size = static_cast<uint32_t>(h.vecs[i].iov_len);
      r.requester_offset = address(h.memory[i]);
      r.storage_offset = x.offset + uint64_t(i) * slice_;
    }
    if (status s = q.submit(slot, r); !ok(s)) on_complete(slot, s);
  }
}

void host_backend::on_complete(uint32_t slot, status result) noexcept {
  if (slot >= owner_.size() || owner_[slot] == nullptr) return;
  host_io& h = *owner_[slot];
  if (!ok(result) && ok(h.error)) h.error = result;
  if (h.pending == 0 || --h.pending != 0) return;
  done_.push_back(&h);
  if (done_.size() == 1 && source_ != nullptr) engine_->call_at_pass_end(*source_);
}

void host_backend::take_completions(std::vector<io*>& out) {
  for (host_io* h : done_) {
    h->result = h->error;
    out.push_back(h);
  }
  done_.clear();
}

void host_backend::release(io& x) noexcept {
  auto& h = static_cast<host_io&>(x);
  for (uint32_t slot : h.slots) {
    owner_[slot] = nullptr;
    free_slots_.push_back(slot);
  }
  for (const auto& r : h.memory) blocks_.give_back(r);
  h.slots.clear();
  h.memory.clear();
  free_ios_.push_back(&h);
}

}  // namespace zc::nbd
