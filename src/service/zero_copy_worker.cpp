#include "service/zero_copy_worker.hpp"

#include <fmt/format.h>

#include <atomic>
#include <memory>

#include "comch/consumer.hpp"
#include "comch/producer.hpp"
#include "core/buffer.hpp"
#include "core/log.hpp"
#include "core/memory_map.hpp"
#include "rdma/context.hpp"
#include "service/retry_queue.hpp"
#include "storage/io_message.hpp"

namespace zc::service {

using storage::io_message_size;
using storage::io_message_type;
using storage::io_message_view;

namespace {
// A send to the host that found no posted buffer is retried from the engine; the producer wakes
// the engine when the host posts one, and this bound covers a wake-up that got lost.
constexpr auto backlog_retry = std::chrono::milliseconds(1);
// How long a destroyed io_path lets its contexts stop before they are destroyed anyway.
constexpr auto teardown_limit = std::chrono::milliseconds(2000);
}  // namespace

// The engine-thread half of a worker; every member and method belongs to the worker's thread.
// Request slot i: buffer A_i (comch receive -> rdma send, or answered in place on failure).
// Response slot j: buffer B_j (rdma receive -> comch send).
class zero_copy_worker::io_path final : public core::event_source {
 public:
  io_path(uint32_t cpu, core::progress_engine& engine, const core::device& device,
          comch::connection& conn, uint32_t transactions);
  ~io_path() override;

  uint32_t consumer_id() const noexcept { return consumer_->id(); }
  std::vector<uint8_t> export_connection(storage::rdma_role role) {
    return context_of(role).export_connection();
  }
  void connect(storage::rdma_role role, std::span<const uint8_t> blob);
  bool ready() const noexcept {
    return consumer_->state() == core::context_state::running &&
           producer_->state() == core::context_state::running &&
           control_->state() == core::context_state::running &&
           data_->state() == core::context_state::running;
  }
  void start_serving(uint32_t host_consumer);
  void stop_serving() noexcept { serving_ = false; }
  uint32_t in_flight() const noexcept { return in_flight_; }
  void stop_rdma() noexcept {
    (void)control_->stop();
    (void)data_->stop();
  }
  bool rdma_stopped() const noexcept {
    return control_->state() == core::context_state::idle &&
           data_->state() == core::context_state::idle;
  }
  void stop_comch() noexcept {
    (void)consumer_->stop();
    (void)producer_->stop();
  }
  bool comch_stopped() const noexcept {
    return consumer_->state() == core::context_state::idle &&
           producer_->state() == core::context_state::idle;
  }
  bool rdma_lost() const noexcept { return rdma_lost_.load(std::memory_order_relaxed); }
  zero_copy_worker_stats stats() const noexcept {
    return {cpu_, operations_, errors_, engine_.hits(), engine_.misses()};
  }

  // event_source: retries the answers the host had no buffer for.
  size_t poll() override;
  core::steady_clock::time_point next_deadline() const override {
    return backlog_.empty() && relays_.empty() ? core::steady_clock::time_point::max()
                                               : core::steady_clock::now() + backlog_retry;
  }

 private:
  struct request_slot {
    core::buffer* message = nullptr;  // A_i
    comch::consumer_post_recv_task* receive = nullptr;
    rdma::send_task* relay = nullptr;
    comch::producer_send_task* answer = nullptr;  // A_i back to the host when the relay failed
  };
  struct response_slot {
    core::buffer* message = nullptr;  // B_j
    rdma::receive_task* receive = nullptr;
    comch::producer_send_task* forward = nullptr;
  };

  rdma::context& context_of(storage::rdma_role role) {
    return role == storage::rdma_role::io_control ? *control_ : *data_;
  }
  uint32_t index_of(const core::task_base& t) const noexcept {
    return static_cast<uint32_t>(t.get_user_data().u64);
  }
  void note_error(const char* what, status s) noexcept;

  // Request path.
  void post_request_receive(request_slot& s) noexcept;
  void on_request(request_slot& s) noexcept;
  void on_request_receive_failed(request_slot& s, status why) noexcept;
  void on_relayed(request_slot& s) noexcept;
  void answer_failure(uint32_t index, status why) noexcept;
  void on_failure_answered(request_slot& s, bool delivered) noexcept;
  // Response path.
  void post_response_receive(response_slot& s) noexcept;
  void on_response(uint32_t index) noexcept;
  void on_response_receive_failed(response_slot& s, status why) noexcept;
  void on_forwarded(response_slot& s, bool delivered) noexcept;
  // Host sends: submit, or queue when the host has no posted buffer yet.
  void send_to_host(uint32_t key) noexcept;
  status submit_to_host(uint32_t key) noexcept;
  void host_send_failed(uint32_t key, status why) noexcept;
  void relay(uint32_t index) noexcept;
  void io_done() noexcept {
    if (in_flight_ > 0) --in_flight_;
  }

  const uint32_t cpu_;
  core::progress_engine& engine_;
  const uint32_t transactions_;
  bool serving_ = false;
  bool attached_ = false;
  uint32_t host_consumer_ = 0;
  uint32_t in_flight_ = 0;  // requests taken from the host and not answered yet
  uint64_t operations_ = 0;
  uint64_t errors_ = 0;
  bool error_logged_ = false;
  std::unique_ptr<core::memory_map> messages_;  // A_0..A_{N-1}, then B_0..B_{N-1}
  core::buffer_inventory inventory_;
  std::vector<request_slot> requests_;
  std::vector<response_slot> responses_;
  // Host sends waiting for a posted buffer, oldest first: key j < N is B_j, N + i is A_i. Sized
  // for every slot at once, so a push never allocates and never fails.
  retry_queue backlog_;
  // Requests UCX could not take yet (rdma submit answered `again`: too many unsent messages),
  // oldest first, retried from the engine; sized for every request slot.
  retry_queue relays_;
  // Set on the worker's thread when an rdma connection leaves running while IOs are served;
  // read by the control thread (check_health), so atomic.
  std::atomic<bool> rdma_lost_{false};
  // Declared last, so destroyed first: nothing they hold may outlive the buffers and slots.
  std::unique_ptr<comch::consumer> consumer_;
  std::unique_ptr<comch::producer> producer_;
  std::unique_ptr<rdma::context> control_;
  std::unique_ptr<rdma::context> data_;
};

zero_copy_worker::io_path::io_path(uint32_t cpu, core::progress_engine& engine,
                                   const core::device& device, comch::connection& conn,
                                   uint32_t transactions)
    : cpu_(cpu),
      engine_(engine),
      transactions_(transactions),
      // PCI read-write: the host's producer writes requests straight into A_i.
      messages_(core::memory_map::allocate(
          size_t(transactions) * 2 * io_message_size,
          core::access::local_read_write | core::access::pci_read_write)),
      inventory_(transactions * 2),
      requests_(transactions),
      responses_(transactions),
      backlog_(size_t(transactions) * 2),
      relays_(transactions) {
  consumer_ = std::make_unique<comch::consumer>(
      engine, conn,
      comch::consumer_config{
          .buffers = messages_.get(),
          .post_recv_tasks = transactions,
          .on_recv =
              [this](comch::consumer_post_recv_task& t) { on_request(requests_[index_of(t)]); },
          .on_recv_error =
              [this](comch::consumer_post_recv_task& t) {
                on_request_receive_failed(requests_[index_of(t)], t.result());
              }});
  producer_ = std::make_unique<comch::producer>(
      engine, conn,
      comch::producer_config{
          .send_tasks = transactions * 2,
          .on_send_done =
              [this](comch::producer_send_task& t) {
                const uint32_t k = index_of(t);
                if (k < transactions_)
                  on_forwarded(responses_[k], true);
                else
                  on_failure_answered(requests_[k - transactions_], true);
              },
          .on_send_error =
              [this](comch::producer_send_task& t) { host_send_failed(index_of(t), t.result()); }});
  control_ = std::make_unique<rdma::context>(engine, device);
  data_ = std::make_unique<rdma::context>(engine, device);
  // io_control: nothing of ours is the peer's to touch. io_data: the target moves the host's
  // pages (our re-export of them) both ways through it.
  for (rdma::context* ctx : {control_.get(), data_.get()})
    ctx->set_state_changed_callback(
        [this](core::context&, core::context_state previous, core::context_state next) {
          if (serving_ && previous == core::context_state::running &&
              next != core::context_state::running && !rdma_lost_.exchange(true))
            ZC_LOG_ERROR("worker {}: rdma connection to the target lost", cpu_);
        });
  control_->set_permissions(core::access::local_read_only);
  data_->set_permissions(core::access::rdma_read | core::access::rdma_write);
  control_->configure<rdma::send_task>(
      transactions, [this](rdma::send_task& t) { on_relayed(requests_[index_of(t)]); },
      [this](rdma::send_task& t) { answer_failure(index_of(t), t.result()); });
  control_->configure<rdma::receive_task>(
      transactions, [this](rdma::receive_task& t) { on_response(index_of(t)); },
      [this](rdma::receive_task& t) {
        on_response_receive_failed(responses_[index_of(t)], t.result());
      });
  uint8_t* base = messages_->data();
  for (uint32_t i = 0; i < transactions; ++i) {
    request_slot& r = requests_[i];
    throw_if_failed(inventory_.get_by_addr(*messages_, base + size_t(i) * io_message_size,
                                           io_message_size, r.message),
                    "request buffer");
    auto ud = core::make_user_data(i);
    r.receive = consumer_->allocate_post_recv(*r.message);
    r.answer = producer_->allocate_send(*r.message, 0);
    if (r.receive == nullptr || r.answer == nullptr)
      throw status_error(status::no_memory, "comch tasks");
    r.receive->set_user_data(ud);
    r.answer->set_user_data(core::make_user_data(transactions + i));
    throw_if_failed(control_->allocate(ud, r.relay), "rdma send task");
    r.relay->set_src(*r.message);

    response_slot& p = responses_[i];
    throw_if_failed(
        inventory_.get_by_addr(*messages_, base + size_t(transactions + i) * io_message_size,
                               io_message_size, p.message),
        "response buffer");
    throw_if_failed(control_->allocate(ud, p.receive), "rdma receive task");
    p.forward = producer_->allocate_send(*p.message, 0);
    if (p.forward == nullptr) throw status_error(status::no_memory, "comch send task");
    p.forward->set_user_data(ud);
    p.receive->set_dst(*p.message);
  }
  // The consumer first: its id is assigned now, before the next worker's (pairing rule).
  throw_if_failed(consumer_->start(), "start comch consumer");
  throw_if_failed(producer_->start(), "start comch producer");
  throw_if_failed(control_->start(), "start io_control context");
  throw_if_failed(data_->start(), "start io_data context");
  engine_.attach(*this);
  attached_ = true;
}

zero_copy_worker::io_path::~io_path() {
  // What the contexts flush on their way out is not an error of the session.
  serving_ = false;
  if (attached_) engine_.detach(*this);
  // Comch endpoints must be idle when destroyed; a bounded wait, as everywhere.
  stop_comch();
  stop_rdma();
  engine_.run_until([this] { return comch_stopped() && rdma_stopped(); }, teardown_limit);
  if (!comch_stopped() || !rdma_stopped()) {
    // A transport may still read or write the message buffers (a peer mid-copy, a send UCX
    // holds): they stay mapped rather than be freed under it.
    ZC_LOG_ERROR("worker {}: endpoints did not stop in time; their message memory is kept", cpu_);
    (void)messages_.release();
  }
}

void zero_copy_worker::io_path::connect(storage::rdma_role role, std::span<const uint8_t> blob) {
  rdma::context& ctx = context_of(role);
  if (ctx.state() != core::context_state::starting)
    throw status_error(status::already_exist,
                       fmt::format("worker on cpu {} already has its {} connection", cpu_,
                                   storage::to_string(role)));
  ctx.connect(blob);
}

void zero_copy_worker::io_path::start_serving(uint32_t host_consumer) {
  host_consumer_ = host_consumer;
  for (auto& r : requests_) r.answer->set(*r.message, host_consumer);
  for (auto& p : responses_) p.forward->set(*p.message, host_consumer);
  serving_ = true;
  for (auto& p : responses_) post_response_receive(p);
  for (auto& r : requests_) post_request_receive(r);
}

// The first error of a worker is logged; later ones are counted and logged at debug level, so a
// misbehaving peer cannot flood the log from the data path.
void zero_copy_worker::io_path::note_error(const char* what, status s) noexcept {
  ++errors_;
  if (!error_logged_) {
    error_logged_ = true;
    ZC_LOG_ERROR("worker {}: {}: {} (later errors are only counted)", cpu_, what, status_name(s));
  } else {
    ZC_LOG_DEBUG("worker {}: {}: {}", cpu_, what, status_name(s));
  }
}

// ---- request path: host -> comch receive A_i -> rdma send A_i -> receive A_i again

void zero_copy_worker::io_path::post_request_receive(request_slot& s) noexcept {
  (void)s.message->set_data(s.message->head(), 0);
  if (!serving_) return;
  if (status r = consumer_->submit(*s.receive); !ok(r)) note_error("cannot post comch receive", r);
}

void zero_copy_worker::io_path::on_request(request_slot& s) noexcept {
  if (!serving_) return;
  if (s.receive->received_length() != io_message_size) {
    note_error("IO message of the wrong length refused", status::invalid_value);
    post_request_receive(s);
    return;
  }
  ++in_flight_;
  relay(static_cast<uint32_t>(&s - requests_.data()));
}

// Relayed byte for byte, from the buffer it arrived in: the target judges the type and fields.
// FIFO: nothing overtakes a request already waiting for UCX.
void zero_copy_worker::io_path::relay(uint32_t index) noexcept {
  status r = relays_.empty() ? control_->submit(*requests_[index].relay) : status::again;
  if (r == status::again) {
    if (relays_.push(index)) return;
    r = status::no_memory;
  }
  if (!ok(r)) answer_failure(index, r);
}

void zero_copy_worker::io_path::on_request_receive_failed(request_slot& s, status why) noexcept {
  if (!serving_) return;  // a stop flushes the posted receives
  note_error("comch receive failed", why);
  if (consumer_->state() == core::context_state::running) post_request_receive(s);
}

void zero_copy_worker::io_path::on_relayed(request_slot& s) noexcept {
  post_request_receive(s);
}

// The request could not reach the target: the host gets it back as a result carrying the
// failure, every other field unchanged, so its transaction ends instead of hanging.
void zero_copy_worker::io_path::answer_failure(uint32_t index, status why) noexcept {
  note_error("IO not relayed to the target", why);
  io_message_view msg(requests_[index].message->head());
  msg.set_type(io_message_type::result);
  msg.set_result(why);
  send_to_host(transactions_ + index);
}

void zero_copy_worker::io_path::on_failure_answered(request_slot& s, bool delivered) noexcept {
  if (delivered) ++operations_;
  io_done();
  post_request_receive(s);
}

// ---- response path: target -> rdma receive B_j -> comch send B_j -> receive B_j again

void zero_copy_worker::io_path::post_response_receive(response_slot& s) noexcept {
  (void)s.message->set_data(s.message->head(), 0);
  if (!serving_) return;
  if (status r = control_->submit(*s.receive); !ok(r)) note_error("cannot post rdma receive", r);
}

void zero_copy_worker::io_path::on_response(uint32_t index) noexcept {
  response_slot& s = responses_[index];
  if (s.receive->received_length() != io_message_size) {
    note_error("target response of the wrong length refused", status::invalid_value);
    post_response_receive(s);
    return;
  }
  // The target's result goes to the host unchanged (the reference forced SUCCESS, §8.3).
  send_to_host(index);
}

void zero_copy_worker::io_path::on_response_receive_failed(response_slot& s, status why) noexcept {
  if (!serving_) return;
  note_error("rdma receive failed", why);
  if (control_->state() == core::context_state::running) post_response_receive(s);
}

void zero_copy_worker::io_path::on_forwarded(response_slot& s, bool delivered) noexcept {
  if (delivered) ++operations_;
  io_done();
  post_response_receive(s);
}

// ---- sends to the host

status zero_copy_worker::io_path::submit_to_host(uint32_t key) noexcept {
  comch::producer_send_task& t =
      key < transactions_ ? *responses_[key].forward : *requests_[key - transactions_].answer;
  return producer_->submit(t);
}

void zero_copy_worker::io_path::send_to_host(uint32_t key) noexcept {
  // FIFO: nothing overtakes an answer already waiting for the host.
  status r = backlog_.empty() ? submit_to_host(key) : status::again;
  if (r == status::again) {
    if (backlog_.push(key)) return;
    r = status::no_memory;
  }
  if (!ok(r)) host_send_failed(key, r);
}

void zero_copy_worker::io_path::host_send_failed(uint32_t key, status why) noexcept {
  note_error("answer not delivered to the host", why);
  if (key < transactions_)
    on_forwarded(responses_[key], false);
  else
    on_failure_answered(requests_[key - transactions_], false);
}

size_t zero_copy_worker::io_path::poll() {
  size_t sent = 0;
  while (!relays_.empty()) {
    const uint32_t index = relays_.front();
    const status r = control_->submit(*requests_[index].relay);
    if (r == status::again) break;
    relays_.pop();
    ++sent;
    if (!ok(r)) answer_failure(index, r);
  }
  while (!backlog_.empty()) {
    const uint32_t key = backlog_.front();
    status r = submit_to_host(key);
    if (r == status::again) break;
    backlog_.pop();
    ++sent;
    if (!ok(r)) host_send_failed(key, r);
  }
  return sent;
}

// ---- zero_copy_worker: the control thread's side

zero_copy_worker::zero_copy_worker(uint32_t cpu, core::poll_mode mode, const core::device& device,
                                   comch::connection& conn, uint32_t transactions,
                                   zero_copy_worker_limits limits)
    : cpu_(cpu), host_(cpu, mode, limits) {
  if (transactions == 0 || transactions > max_worker_transactions)
    throw status_error(status::invalid_value, fmt::format("transaction count {} is outside 1..{}",
                                                          transactions, max_worker_transactions));
  // By value: a build that outlives this wait must not read this constructor's frame.
  host_.build([cpu, engine = &host_.engine(), device = &device, conn = &conn, transactions] {
    return std::make_unique<io_path>(cpu, *engine, *device, *conn, transactions);
  });
  consumer_id_ = host_.call([](io_path& io) { return io.consumer_id(); });
}

zero_copy_worker::~zero_copy_worker() = default;

std::vector<uint8_t> zero_copy_worker::export_connection(storage::rdma_role role) {
  return host_.call([role](io_path& io) { return io.export_connection(role); });
}

void zero_copy_worker::connect(storage::rdma_role role, std::span<const uint8_t> peer_blob) {
  // The blob is copied: a connect that outlives this wait must not read the caller's message.
  host_.call([role, blob = std::vector<uint8_t>(peer_blob.begin(), peer_blob.end())](io_path& io) {
    io.connect(role, blob);
  });
}

bool zero_copy_worker::ready() {
  return host_.ready();
}

void zero_copy_worker::start_data_path(uint32_t host_consumer_id) {
  host_.start_data_path(host_consumer_id);
}

void zero_copy_worker::drain() {
  host_.drain();
}

void zero_copy_worker::stop() {
  host_.stop();
}

void zero_copy_worker::close_comch() {
  host_.close_comch();
}

bool zero_copy_worker::rdma_lost() const noexcept {
  return host_.rdma_lost();
}

zero_copy_worker_stats zero_copy_worker::stats() {
  return host_.call([](io_path& io) { return io.stats(); });
}

}  // namespace zc::service
