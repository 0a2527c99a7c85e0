#include "host/worker.hpp"

#include "core/log.hpp"

namespace zc::host {

using storage::io_message_size;
using storage::io_message_type;
using storage::io_message_view;

namespace {

constexpr uint64_t user_data_of(uint32_t slot, uint32_t generation) noexcept {
  return (uint64_t(generation) << 32) | slot;
}

constexpr uint32_t max_slots = 1u << 20;

// Checked before anything is sized from it.
queue_options checked(queue_options options) {
  if (options.slots == 0 || options.slots > max_slots)
    throw status_error(status::invalid_value, "a worker needs 1..1048576 transaction slots");
  return options;
}

}  // namespace

io_queue::io_queue(core::progress_engine& engine, comch::connection& connection,
                   queue_options options)
    : engine_(engine),
      options_(checked(std::move(options))),
      slots_(options_.slots),
      backlog_(options_.slots),
      inventory_(options_.slots * 3) {
  const uint32_t receives = options_.slots * 2;
  requests_map_ = core::memory_map::allocate(size_t(options_.slots) * io_message_size,
                                             core::access::local_read_write);
  responses_map_ =
      core::memory_map::allocate(size_t(receives) * io_message_size,
                                 core::access::local_read_write | core::access::pci_read_write);
  producer_ = std::make_unique<comch::producer>(
      engine, connection,
      comch::producer_config{
          .send_tasks = options_.slots,
          .on_send_done = [this](comch::producer_send_task& t) { on_sent(t, true); },
          .on_send_error = [this](comch::producer_send_task& t) { on_sent(t, false); }});
  consumer_ = std::make_unique<comch::consumer>(
      engine, connection,
      comch::consumer_config{
          .buffers = responses_map_.get(),
          .post_recv_tasks = receives,
          .on_recv = [this](comch::consumer_post_recv_task& t) { on_response(t); },
          .on_recv_error = [this](comch::consumer_post_recv_task& t) { on_receive_failed(t); }});
  throw_if_failed(consumer_->start(), "start the response consumer");
  throw_if_failed(producer_->start(), "start the request producer");
  for (uint32_t i = 0; i < options_.slots; ++i) {
    slot& s = slots_[i];
    throw_if_failed(
        inventory_.get_by_addr(*requests_map_, requests_map_->data() + i * io_message_size,
                               io_message_size, s.message),
        "request buffer");
    s.send = producer_->allocate_send(*s.message, 0);
    if (s.send == nullptr) throw status_error(status::no_memory, "no producer send task");
    s.send->set_user_data(core::make_user_data(i));
  }
  receives_.reserve(receives);
  for (uint32_t i = 0; i < receives; ++i) {
    core::buffer* b = nullptr;
    throw_if_failed(
        inventory_.get_by_addr(*responses_map_, responses_map_->data() + i * io_message_size,
                               io_message_size, b),
        "response buffer");
    auto* t = consumer_->allocate_post_recv(*b);
    if (t == nullptr) throw status_error(status::no_memory, "no consumer receive task");
    receives_.push_back(t);
    throw_if_failed(consumer_->submit(*t), "post a response buffer");
  }
  engine_.attach(*this);
}

io_queue::~io_queue() {
  engine_.detach(*this);
  // Both endpoints must be idle before they are destroyed; what they flush is not an error.
  stop();
  (void)engine_.run_until([this] { return stopped(); }, std::chrono::seconds(5));
  if (!stopped()) {
    // A peer mid-copy into our response buffers keeps the consumer stopping: its memory must
    // outlive it, so it is left mapped rather than freed under the copy.
    ZC_LOG_ERROR("comch endpoints of a worker did not stop in time; their memory is kept");
    (void)responses_map_.release();
    (void)requests_map_.release();
  }
}

bool io_queue::ready() const noexcept {
  return has_peer_ && failure_ == status::success &&
         consumer_->state() == core::context_state::running &&
         producer_->state() == core::context_state::running;
}

status io_queue::submit(uint32_t index, const io_request& request) noexcept {
  if (index >= slots_.size()) return status::invalid_value;
  if (request.io_size == 0 && request.type != io_message_type::flush) return status::invalid_value;
  if (!ready() || stopping_) return status::bad_state;
  slot& s = slots_[index];
  if (s.busy) return status::in_use;
  ++s.generation;
  io_message_view m(s.message->head());
  m.clear();
  m.set_type(request.type);
  m.set_user_data(user_data_of(index, s.generation));
  m.set_io_size(request.io_size);
  m.set_requester_offset(request.requester_offset);
  m.set_storage_offset(request.storage_offset);
  (void)s.message->set_data(s.message->head(), io_message_size);
  s.request = request;
  s.busy = true;
  s.sent = s.answered = false;
  s.result = status::success;
  s.deadline = engine_.pass_time() + options_.io_timeout;
  if (s.deadline < next_check_) next_check_ = s.deadline;
  const status r = push(index);
  if (r == status::again) {
    backlog_[(backlog_head_ + backlog_count_) % backlog_.size()] = index;
    ++backlog_count_;
  } else if (!ok(r)) {
    s.busy = false;
    return r;
  }
  ++in_flight_;
  return status::success;
}

status io_queue::push(uint32_t index) noexcept {
  slot& s = slots_[index];
  s.send->set(*s.message, peer_);
  return producer_->submit(*s.send);
}

size_t io_queue::poll() {
  size_t done = 0;
  while (backlog_count_ != 0) {
    const uint32_t index = backlog_[backlog_head_];
    const status r = push(index);
    if (r == status::again) break;
    backlog_head_ = (backlog_head_ + 1) % backlog_.size();
    --backlog_count_;
    slot& s = slots_[index];
    ++done;
    if (!ok(r)) {
      s.sent = true;
      answer(s, r);
      finish_if_done(index);
    }
  }
  if (in_flight_ != 0 && failure_ == status::success) {
    const auto now = engine_.pass_time();
    if (now >= next_check_) {
      next_check_ = core::steady_clock::time_point::max();
      for (uint32_t i = 0; i < slots_.size(); ++i) {
        const slot& s = slots_[i];
        if (!s.busy || s.answered) continue;
        if (s.deadline <= now) {
          // As an rdma connection whose retries ran out: the service may still act on this IO
          // (and on every other in flight), so the queue gives up on the service: nothing more
          // is accepted, and those still waiting for a buffer are never sent. The IOs it has
          // are not handed back while a transfer into or out of their memory may still happen:
          // each completes with the service's answer, or once the connection is gone.
          ZC_LOG_ERROR(
              "the IO at storage offset {:#x} got no response in {} ms: giving up on "
              "the service; its IOs complete when it answers them or goes away",
              s.request.storage_offset, options_.io_timeout.count());
          give_up(status::time_out);
          return done + 1;
        }
        if (s.deadline < next_check_) next_check_ = s.deadline;
      }
    }
  }
  return done;
}

core::steady_clock::time_point io_queue::next_deadline() const {
  return in_flight_ != 0 && failure_ == status::success ? next_check_
                                                        : core::steady_clock::time_point::max();
}

void io_queue::on_sent(comch::producer_send_task& t, bool ok) {
  const uint32_t index = static_cast<uint32_t>(t.get_user_data().u64);
  slot& s = slots_[index];
  s.sent = true;
  if (!ok) answer(s, t.result());
  finish_if_done(index);
}

void io_queue::on_response(comch::consumer_post_recv_task& t) {
  core::buffer& b = t.buf();
  if (t.received_length() != io_message_size) {
    if (stray_++ == 0)
      ZC_LOG_ERROR("a {}-byte response from the service was ignored", t.received_length());
    repost(t);
    return;
  }
  // Everything needed is read out before the buffer goes back to the service.
  io_message_view m(b.data());
  const uint64_t user_data = m.user_data();
  const uint32_t index = static_cast<uint32_t>(user_data);
  const uint32_t generation = static_cast<uint32_t>(user_data >> 32);
  const bool is_result = m.type() == io_message_type::result;
  const status result = m.result();
  const uint32_t io_size = m.io_size();
  const uint64_t requester_offset = m.requester_offset();
  const uint64_t storage_offset = m.storage_offset();
  repost(t);
  if (index >= slots_.size() || !slots_[index].busy || slots_[index].generation != generation ||
      slots_[index].answered) {
    if (stray_++ == 0)
      ZC_LOG_WARN("a response matched no IO in flight (user_data {:#x}); ignored", user_data);
    return;
  }
  slot& s = slots_[index];
  if (!is_result || io_size != s.request.io_size ||
      requester_offset != s.request.requester_offset ||
      storage_offset != s.request.storage_offset) {
    ZC_LOG_ERROR("the response to the IO at storage offset {} does not match it",
                 s.request.storage_offset);
    answer(s, status::unexpected);
  } else {
    answer(s, result);
  }
  finish_if_done(index);
}

void io_queue::on_receive_failed(comch::consumer_post_recv_task& t) {
  if (stopping_) return;  // a stop flushes the posted buffers
  const status why = t.result() == status::success ? status::connection_reset : t.result();
  if (failure_ == status::success)
    ZC_LOG_ERROR("the response consumer failed: {}", status_name(why));
  fail_all(why);
}

void io_queue::repost(comch::consumer_post_recv_task& t) noexcept {
  core::buffer& b = t.buf();
  (void)b.set_data(b.head(), 0);
  // Also after give_up(): the answers to the IOs still held must be able to arrive.
  if (stopping_) return;
  if (status r = consumer_->submit(t); !ok(r)) {
    ZC_LOG_ERROR("cannot post a response buffer again: {}", status_name(r));
    fail_all(r);
  }
}

void io_queue::answer(slot& s, status result) noexcept {
  if (s.answered) return;
  s.answered = true;
  s.result = result;
}

void io_queue::finish_if_done(uint32_t index) noexcept {
  slot& s = slots_[index];
  if (!s.busy || !s.sent || !s.answered) return;
  s.busy = false;
  --in_flight_;
  if (options_.on_complete) options_.on_complete(index, s.result);
}

// The queue stops taking IOs; those still waiting for a buffer never went out and complete with
// `why` now. IOs the service has stay in flight (see poll()).
void io_queue::give_up(status why) noexcept {
  if (failure_ == status::success) failure_ = why;
  next_check_ = core::steady_clock::time_point::max();  // no deadline is checked any more
  while (backlog_count_ != 0) {
    const uint32_t index = backlog_[backlog_head_];
    backlog_head_ = (backlog_head_ + 1) % backlog_.size();
    --backlog_count_;
    slots_[index].sent = true;  // never went out: nothing references it
    answer(slots_[index], why);
    finish_if_done(index);
  }
}

// The connection to the service is gone, or this side stops: every IO in flight completes with
// `why`. After a stop (not a lost connection) a service that was given up on may still move the
// data of the IOs it had: see stop().
void io_queue::fail_all(status why) noexcept {
  give_up(why);
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].busy) continue;
    answer(slots_[i], why);
    finish_if_done(i);
  }
}

void io_queue::stop() noexcept {
  if (stopping_) return;
  stopping_ = true;
  (void)consumer_->stop();
  (void)producer_->stop();
  fail_all(status::shutdown);
}

bool io_queue::stopped() const noexcept {
  return consumer_->state() == core::context_state::idle &&
         producer_->state() == core::context_state::idle;
}

// ---- worker: the control thread's side

worker::worker(uint32_t index, uint32_t cpu, core::poll_mode mode, comch::connection& connection,
               queue_options options, std::chrono::milliseconds limit)
    : index_(index), cpu_(cpu), limit_(limit), thread_(mode, cpu) {
  queue_ = core::engine_owned<io_queue>::build(
      thread_,
      [engine = &thread_.engine(), conn = &connection, options = std::move(options)]() mutable {
        return std::make_unique<io_queue>(*engine, *conn, std::move(options));
      },
      limit);
  consumer_id_ = thread_.call([q = queue_.get()] { return q->consumer_id(); }, limit_);
}

worker::~worker() = default;

void worker::pair(uint32_t service_consumer_id) {
  thread_.call([q = queue_.get(), service_consumer_id] { q->set_peer(service_consumer_id); },
               limit_);
}

bool worker::ready() {
  return thread_.call([q = queue_.get()] { return q->ready(); }, limit_);
}

void worker::stop() {
  io_queue* q = queue_.get();
  thread_.call([q] { q->stop(); }, limit_);
  if (!thread_.wait_until([q] { return q->stopped(); }, limit_))
    ZC_LOG_ERROR("worker {}: comch endpoints not stopped after {} ms", index_, limit_.count());
}

}  // namespace zc::host
