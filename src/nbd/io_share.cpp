// The NBD server: who gets IO memory when (each connection within its share, waiters in turn),
// and the block locks that keep read-modify-writes from undoing other writes.
#include "nbd/server_internal.hpp"

namespace zc::nbd {

using namespace server_detail;

// Gets an io for what r does next, or queues r behind the connection's earlier waiters until
// memory comes back or the connection is back within its share.
void server::start_io(connection& c, uint32_t index) {
  request& r = c.requests[index];
  io* x = c.wants.empty() ? take_io(c, io_length(r)) : nullptr;
  if (x == nullptr) {
    r.at = request::stage::want_io;
    if (c.wants.empty()) wanting_.push_back(&c);
    c.wants.push_back(index);
    recount(c);
    if (c.at == connection::phase::payload && c.receiving == index) c.blocked = true;
    return;
  }
  use_io(c, index, *x);
}

// IO memory and queue entries are shared so that no client can starve the others, and no request
// waits behind another connection's:
// - a connection holds at most memory() / n bytes and slots() / n slots, n the connections that
//   hold or want an io (at least 2 where two may connect: a newcomer finds half free); one io
//   always, so each makes progress (the backend keeps one io within half a worker's memory);
// - each connection's waiters are served in order, connections in turn: one whose next request
//   does not fit now holds up no other connection;
// - a request passed over for max_misses passes in which memory came back (a large one among a
//   stream of small ones) reserves what comes back: no other connection gets an io until it has
//   one, which takes no longer than the ios out now take to finish. Only a shortage is reserved
//   against: memory that is free in all but in pieces too small for the request (free_in_all)
//   reserves nothing and ends a reservation, since holding the others back would not mend it.
bool server::within_share(const connection& c, uint32_t length) const noexcept {
  if (c.held_slots == 0) return true;
  const uint32_t n = std::max(contenders_, std::min<uint32_t>(2, options_.max_connections));
  const uint32_t block = storage_.block_size();
  const uint64_t bytes = (uint64_t(length) + block - 1) / block * block;
  return c.held_bytes + bytes <= storage_.memory() / n &&
         c.held_slots + storage_.slots_for(length) <= storage_.slots() / n;
}

bool server::free_in_all(uint32_t length) const noexcept {
  return storage_.memory() - held_bytes_ >= length &&
         storage_.slots() - held_slots_ >= storage_.slots_for(length);
}

io* server::take_io(connection& c, uint32_t length) {
  if ((reserved_ != nullptr && reserved_ != &c) || !within_share(c, length)) return nullptr;
  io* x = storage_.acquire(length);
  if (x == nullptr) return nullptr;
  x->owner = &c;
  c.held_bytes += x->length;
  c.held_slots += storage_.slots_for(x->length);
  held_bytes_ += x->length;
  held_slots_ += storage_.slots_for(x->length);
  recount(c);
  return x;
}

void server::release_io(io& x) noexcept {
  auto& c = *static_cast<connection*>(x.owner);
  c.held_bytes -= x.length;
  c.held_slots -= storage_.slots_for(x.length);
  held_bytes_ -= x.length;
  held_slots_ -= storage_.slots_for(x.length);
  recount(c);
  storage_.release(x);
  memory_freed_ = true;
}

void server::recount(connection& c) noexcept {
  const bool now = c.held_slots != 0 || !c.wants.empty();
  if (now == c.contending) return;
  c.contending = now;
  if (now)
    ++contenders_;
  else
    --contenders_;
}

// One rule for every write that shares a block with a read-modify-write, so that the bytes an
// acknowledged write put in a block are never brought back to what they were by one that read the
// block before and writes it back after: a read-modify-write (an unaligned WRITE, a WRITE_ZEROES'
// partial block) holds the blocks of its io (locked_) from before it reads them until its
// write-back has landed, and takes them only when no other write to them is with the backend; any
// other write to a held block waits until they are let go. All wait in one queue,
// lock_waiting_, served in order block by block. A request takes its io before its blocks and
// needs no other memory while it holds them, so a holder never waits for memory that writes
// waiting for its blocks hold.
bool server::write_in_flight_over(const block_range& blocks) const {
  const uint32_t block = storage_.block_size();
  for (const auto& [p, c] : connections_)
    for (const request& q : c->requests)
      if (q.used && q.at == request::stage::submitted && q.x != nullptr && writes(q.x->kind) &&
          blocks_of(q.x->offset, io_bytes(*q.x), block).meets(blocks))
        return true;
  return false;
}

bool server::held_by_another(const block_range& blocks, const request& me) const {
  for (const auto& [held, owner] : locked_)
    if (owner != &me && held.meets(blocks)) return true;
  return false;
}

void server::submit_write(connection& c, uint32_t index) {
  request& r = c.requests[index];
  // The common case, no read-modify-write anywhere; or one whose blocks are its own.
  if ((locked_.empty() && lock_waiting_.empty()) || r.locked) {
    submit_io(c, index);
    return;
  }
  r.at = request::stage::want_lock;
  lock_waiting_.emplace_back(&c, index);
  retry_lock_waiting();
}

void server::take_blocks(connection& c, uint32_t index) {
  c.requests[index].at = request::stage::want_lock;
  lock_waiting_.emplace_back(&c, index);
  retry_lock_waiting();  // at once when its blocks are free and no earlier waiter wants them
}

void server::unlock(request& r) {
  std::erase_if(locked_, [&r](const auto& l) { return l.second == &r; });
  r.locked = false;
  lock_released_ = true;
}

// Oldest first, block by block: a waiter never loses a block it waits for to a later one, and
// does not hold up waiters for other blocks. A read-modify-write takes its blocks and its read is
// submitted; a write that waited for a held block is submitted.
void server::retry_lock_waiting() {
  lock_released_ = false;
  const uint32_t block = storage_.block_size();
  auto& reserved = lock_scan_;  // what the waiters passed over want
  reserved.clear();
  auto taken = [&](const block_range& want) {
    for (const auto& r : reserved)
      if (r.meets(want)) return true;
    return false;
  };
  for (auto it = lock_waiting_.begin(); it != lock_waiting_.end();) {
    auto [c, index] = *it;
    request& r = c->requests[index];
    const block_range want = blocks_of(r.x->offset, io_bytes(*r.x), block);
    const bool takes = r.rmw_reading || r.exclusive;
    const bool go =
        !taken(want) && !held_by_another(want, r) && (!takes || !write_in_flight_over(want));
    if (!go) {
      reserved.push_back(want);
      ++it;
      continue;
    }
    it = lock_waiting_.erase(it);
    if (takes) {
      locked_.emplace_back(want, &r);
      r.locked = true;
    }
    submit_io(*c, index);
    mark(*c);
  }
}

// Gives each waiting connection, in turn, ios for its waiters in order while they fit (see
// within_share); the one reserved goes first.
void server::retry_waiting() {
  // Still short: the others wait (unless it lost its reservation, being over its share now).
  if (reserved_ != nullptr && !serve_wants(*reserved_) && reserved_ != nullptr) return;
  for (size_t n = wanting_.size(); n-- > 0 && !wanting_.empty();) {
    connection* c = wanting_.front();
    wanting_.pop_front();
    if (!serve_wants(*c)) {
      wanting_.push_back(c);
      if (reserved_ == nullptr && c->misses >= max_misses) reserved_ = c;
    }
  }
}

// Serves c's waiters in order; false when one is left waiting.
bool server::serve_wants(connection& c) {
  while (!c.wants.empty()) {
    const uint32_t index = c.wants.front();
    const uint32_t length = io_length(c.requests[index]);
    io* x = take_io(c, length);
    if (x == nullptr) {
      if (!within_share(c, length)) {
        // Over its share (more connections want ios now): it waits for its own ios to come
        // back, and reserves nothing meanwhile.
        c.misses = 0;
        if (reserved_ == &c) reserved_ = nullptr;
      } else if (free_in_all(length)) {
        // The memory is there, in pieces too small for it (around ios some client keeps):
        // holding the others back would not bring it, so nothing is reserved.
        c.misses = 0;
        if (reserved_ == &c) reserved_ = nullptr;
      } else if (reserved_ == nullptr || reserved_ == &c) {
        ++c.misses;  // short of the backend's memory: a pass that counts as a miss
      }
      return false;
    }
    c.wants.pop_front();
    c.misses = 0;
    if (reserved_ == &c) reserved_ = nullptr;
    recount(c);
    // An unaligned write's payload still waits for the read of the blocks around it.
    if (c.at == connection::phase::payload && c.receiving == index && !c.requests[index].rmw)
      c.blocked = false;
    use_io(c, index, *x);
    mark(c);
  }
  return true;
}

}  // namespace zc::nbd
