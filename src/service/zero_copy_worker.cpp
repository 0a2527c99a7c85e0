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
// the engine when the host posts one, and this bound covers a wake-up that got lost. It doubles
// while the host posts nothing, so a host that never posts costs ten wake-ups a second, not 1000.
constexpr auto backlog_retry_min = std::chrono::milliseconds(1);
constexpr auto backlog_retry_max = std::chrono::milliseconds(100);
// An rdma send UCX could not take yet (`again`) is retried this soon.
constexpr auto relay_retry = std::chrono::milliseconds(1);
// How long a destroyed io_path lets its contexts stop before they are destroyed anyway.
constexpr auto teardown_limit = std::chrono::milliseconds(2000);

// The user_data the service gives a relayed request: the target answers with it, and nothing but
// an IO this worker has in flight matches it (the host's own user_data is restored on the way
// back).
constexpr uint64_t tag_of(uint32_t slot, uint32_t generation) noexcept {
  return (uint64_t(generation) << 32) | slot;
}
}  // namespace

// The engine-thread half of a worker; every member and method belongs to the worker's thread.
// Request slot i: buffer A_i (comch receive -> rdma send, or answered in place on failure).
// Response slot j: buffer B_j (rdma receive -> comch send).
class zero_copy_worker::io_path final : public core::event_source {
 public:
  io_path(uint32_t cpu, core::progress_engine& engine, const core::device& device,
          comch::connection& conn, uint32_t transactions, std::chrono::milliseconds io_timeout,
          bool hold_on_loss);
  ~io_path() override;

  uint32_t consumer_id() const noexcept { return consumer_->id(); }
  std::vector<uint8_t> export_connection(storage::rdma_role role) {
    return context_of(role).export_connection();
  }
  void connect(storage::rdma_role role, std::span<const uint8_t> blob);
  bool ready() const noexcept {
    return consumer_->state() == core::context_state::running &&
           producer_->state() == core::context_state::running && rdma_running();
  }
  bool rdma_running() const noexcept {
    return control_ && data_ && control_->state() == core::context_state::running &&
           data_->state() == core::context_state::running;
  }
  void start_serving(uint32_t host_consumer);
  void stop_serving() noexcept { serving_ = false; }
  uint32_t in_flight() const noexcept { return in_flight_; }
  // Fences the target out of the host's memory: both rdma contexts stop (io_data is how the
  // target reaches the host's pages). IOs the target may still act on stay unanswered until
  // answer_held(), once every worker of the session is fenced.
  void stop_rdma() noexcept {
    fencing_ = true;
    if (control_) (void)control_->stop();
    if (data_) (void)data_->stop();
  }
  // Answers, with `why`, every IO relayed to the target and not answered by it. Only once
  // rdma_stopped(): nothing can reach the host's memory any more.
  void answer_held(status why) noexcept;
  bool rdma_stopped() const noexcept {
    return (!control_ || control_->state() == core::context_state::idle) &&
           (!data_ || data_->state() == core::context_state::idle);
  }
  // Once fenced (rdma_stopped()): the stopped contexts go, and with them their UCX worker, so
  // nothing UCX still holds for the target outlives the fence. A rendezvous whose sender died
  // never completes on its own and keeps the host's pages claimed; and a sender killed while
  // writing into the worker's shared-memory FIFO leaves it stuck, delivering nothing more from
  // anyone (rdma::renew_transport). rearm() builds new ones.
  void release_transport() noexcept;
  void stop_comch() noexcept {
    (void)consumer_->stop();
    (void)producer_->stop();
  }
  bool comch_stopped() const noexcept {
    return consumer_->state() == core::context_state::idle &&
           producer_->state() == core::context_state::idle;
  }
  bool rdma_lost() const noexcept { return rdma_lost_.load(std::memory_order_relaxed); }
  // Reconnect: once fenced (rdma_stopped()), new rdma contexts (on a new UCX worker) replace the
  // stopped ones, ready to be connected as at init. The IOs held since the loss stay held.
  void rearm();
  // Reconnect: from now on the IOs of the target are held (as after a loss) and its contexts
  // stop.
  void hold() noexcept { lose(status::connection_reset); }
  // Once the new contexts run: every IO held since the loss (relayed to the lost target, or
  // taken from the host since) is relayed again, with a new tag, so no answer of the lost target
  // can match it. Returns how many.
  uint32_t resume() noexcept;
  zero_copy_worker_stats stats() const noexcept {
    return {cpu_, operations_, errors_, engine_.hits(), engine_.misses()};
  }

  // event_source: retries the sends that could not go yet, and gives up on a target that left
  // a relayed IO unanswered past its deadline.
  size_t poll() override;
  core::steady_clock::time_point next_deadline() const override;

 private:
  // A_i is held from the request's arrival until the host has its answer and the relay's send
  // completed: its user_data carries the service's tag while the target has it.
  struct request_slot {
    core::buffer* message = nullptr;  // A_i
    comch::consumer_post_recv_task* receive = nullptr;
    rdma::send_task* relay = nullptr;
    comch::producer_send_task* answer = nullptr;  // A_i back to the host when the relay failed
    uint64_t host_user_data = 0;
    uint32_t generation = 0;
    bool busy = false;       // taken from the host, not yet free for the next request
    bool relaying = false;   // the relay is queued or UCX holds its send
    bool queued = false;     // the relay waits in relays_: the target cannot have it yet
    bool awaiting = false;   // the target has (or may have) the IO: its answer is accepted
    bool answering = false;  // A_i is on its way back to the host
    core::steady_clock::time_point deadline{};
  };
  struct response_slot {
    core::buffer* message = nullptr;  // B_j
    rdma::receive_task* receive = nullptr;
    comch::producer_send_task* forward = nullptr;
    bool forwarding = false;  // B_j is on its way to the host: not posted again until it arrived
  };

  rdma::context& context_of(storage::rdma_role role) {
    if (!control_ || !data_)
      throw status_error(status::bad_state,
                         fmt::format("worker on cpu {}: no rdma contexts (fenced)", cpu_));
    return role == storage::rdma_role::io_control ? *control_ : *data_;
  }
  uint32_t index_of(const core::task_base& t) const noexcept {
    return static_cast<uint32_t>(t.get_user_data().u64);
  }
  void note_error(const char* what, status s) noexcept;
  // The two rdma contexts and their tasks for every slot, started (at build and at rearm).
  void build_rdma();

  // Request path.
  void post_request_receive(request_slot& s) noexcept;
  void on_request(request_slot& s) noexcept;
  void on_request_receive_failed(request_slot& s, status why) noexcept;
  void on_relayed(request_slot& s) noexcept;
  void on_relay_failed(request_slot& s, status why) noexcept;
  void answer_failure(uint32_t index, status why) noexcept;
  void on_failure_answered(request_slot& s, bool delivered) noexcept;
  void recycle_if_done(request_slot& s) noexcept;
  void fail_unsent(request_slot& s, status why) noexcept;
  void unsent(uint32_t index, status why) noexcept;
  // The target failed (a connection left running, a relay failed on its way, an IO past its
  // deadline): fence at once and tell the control thread; nothing it may act on is answered.
  void lose(status why) noexcept;
  void check_deadlines(core::steady_clock::time_point now) noexcept;
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
  const core::device& device_;
  // --reconnect-timeout: a lost target's IOs, and those the host sends meanwhile, are held for
  // resume() instead of answered (answer_held() still answers them when the session gives up).
  const bool hold_on_loss_;
  const uint32_t transactions_;
  const std::chrono::milliseconds io_timeout_;
  bool serving_ = false;
  bool attached_ = false;
  bool lost_ = false;
  bool fencing_ = false;   // stop_rdma() ran: what the contexts flush is no news
  uint32_t awaiting_ = 0;  // slots whose target answer is still awaited
  core::steady_clock::time_point next_check_ = core::steady_clock::time_point::max();
  std::chrono::milliseconds backlog_retry_ = backlog_retry_min;
  uint32_t host_consumer_ = 0;
  uint32_t in_flight_ = 0;  // requests taken from the host and not answered yet
  uint64_t operations_ = 0;
  uint64_t errors_ = 0;
  log_first error_log_{log::level::error};
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
                                   uint32_t transactions, std::chrono::milliseconds io_timeout,
                                   bool hold_on_loss)
    : cpu_(cpu),
      engine_(engine),
      device_(device),
      hold_on_loss_(hold_on_loss),
      transactions_(transactions),
      io_timeout_(io_timeout),
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
  uint8_t* base = messages_->data();
  for (uint32_t i = 0; i < transactions; ++i) {
    request_slot& r = requests_[i];
    throw_if_failed(inventory_.get_by_addr(*messages_, base + size_t(i) * io_message_size,
                                           io_message_size, r.message),
                    "request buffer");
    r.receive = consumer_->allocate_post_recv(*r.message);
    r.answer = producer_->allocate_send(*r.message, 0);
    if (r.receive == nullptr || r.answer == nullptr)
      throw status_error(status::no_memory, "comch tasks");
    r.receive->set_user_data(core::make_user_data(i));
    r.answer->set_user_data(core::make_user_data(transactions + i));

    response_slot& p = responses_[i];
    throw_if_failed(
        inventory_.get_by_addr(*messages_, base + size_t(transactions + i) * io_message_size,
                               io_message_size, p.message),
        "response buffer");
    p.forward = producer_->allocate_send(*p.message, 0);
    if (p.forward == nullptr) throw status_error(status::no_memory, "comch send task");
    p.forward->set_user_data(core::make_user_data(i));
  }
  // The consumer first: its id is assigned now, before the next worker's (pairing rule).
  throw_if_failed(consumer_->start(), "start comch consumer");
  throw_if_failed(producer_->start(), "start comch producer");
  build_rdma();
  engine_.attach(*this);
  attached_ = true;
}

void zero_copy_worker::io_path::build_rdma() {
  control_ = std::make_unique<rdma::context>(engine_, device_);
  data_ = std::make_unique<rdma::context>(engine_, device_);
  // io_control: nothing of ours is the peer's to touch. io_data: the target moves the host's
  // pages (our re-export of them) both ways through it.
  for (rdma::context* ctx : {control_.get(), data_.get()}) {
    // One timeout model (worker_host.hpp): a relayed IO's deadline is the control timeout; the
    // rdma task timeout, twice it, is only the transport's backstop.
    ctx->set_task_timeout(rdma_timeout_for(io_timeout_));
    ctx->set_state_changed_callback(
        [this, ctx](core::context&, core::context_state previous, core::context_state next) {
          if ((serving_ || awaiting_ != 0) && !fencing_ &&
              previous == core::context_state::running && next != core::context_state::running)
            lose(ctx->failure() == status::success ? status::connection_reset : ctx->failure());
        });
  }
  control_->set_permissions(core::access::local_read_only);
  data_->set_permissions(core::access::rdma_read | core::access::rdma_write);
  control_->configure<rdma::send_task>(
      transactions_, [this](rdma::send_task& t) { on_relayed(requests_[index_of(t)]); },
      [this](rdma::send_task& t) { on_relay_failed(requests_[index_of(t)], t.result()); });
  control_->configure<rdma::receive_task>(
      transactions_, [this](rdma::receive_task& t) { on_response(index_of(t)); },
      [this](rdma::receive_task& t) {
        on_response_receive_failed(responses_[index_of(t)], t.result());
      });
  for (uint32_t i = 0; i < transactions_; ++i) {
    const auto ud = core::make_user_data(i);
    request_slot& r = requests_[i];
    throw_if_failed(control_->allocate(ud, r.relay), "rdma send task");
    r.relay->set_src(*r.message);
    response_slot& p = responses_[i];
    throw_if_failed(control_->allocate(ud, p.receive), "rdma receive task");
    p.receive->set_dst(*p.message);
  }
  throw_if_failed(control_->start(), "start io_control context");
  throw_if_failed(data_->start(), "start io_data context");
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
  error_log_(cpu_, what, s, "later errors are only counted");
}

// ---- request path: host -> comch receive A_i -> rdma send A_i (tagged) -> the target's answer
// (or a failure answered from A_i) -> receive A_i again

void zero_copy_worker::io_path::post_request_receive(request_slot& s) noexcept {
  (void)s.message->set_data(s.message->head(), 0);
  if (!serving_) return;
  if (status r = consumer_->submit(*s.receive); !ok(r)) note_error("cannot post comch receive", r);
}

void zero_copy_worker::io_path::on_request(request_slot& s) noexcept {
  if (s.receive->received_length() != io_message_size) {
    note_error("IO message of the wrong length refused", status::invalid_value);
    post_request_receive(s);
    return;
  }
  const uint32_t index = static_cast<uint32_t>(&s - requests_.data());
  io_message_view msg(s.message->head());
  s.host_user_data = msg.user_data();
  s.busy = true;
  ++in_flight_;
  // Never relayed, so answered at once: after a stop (into a buffer posted before it), or once
  // the target is lost (its connections are being fenced).
  if (!serving_) {
    answer_failure(index, status::shutdown);
    return;
  }
  if (lost_) {
    if (hold_on_loss_) {
      // Held for resume() (or answer_held() when the session gives up).
      s.awaiting = true;
      ++awaiting_;
      return;
    }
    answer_failure(index, status::not_connected);
    return;
  }
  ++s.generation;
  msg.set_user_data(tag_of(index, s.generation));
  s.relaying = true;
  s.awaiting = true;
  ++awaiting_;
  // A flush moves no data and may take as long as the target's storage needs to sync: it is
  // not held to the deadline (the host's own IO deadline still bounds it).
  s.deadline = msg.type() == io_message_type::flush ? core::steady_clock::time_point::max()
                                                    : engine_.coarse_time() + io_timeout_;
  if (s.deadline < next_check_) next_check_ = s.deadline;
  relay(index);
}

// Relayed byte for byte but for the tag, from the buffer it arrived in: the target judges the
// type and fields. FIFO: nothing overtakes a request already waiting for UCX.
void zero_copy_worker::io_path::relay(uint32_t index) noexcept {
  status r = !control_         ? status::not_connected
             : relays_.empty() ? control_->submit(*requests_[index].relay)
                               : status::again;
  if (r == status::again) {
    if (relays_.push(index)) {
      requests_[index].queued = true;
      return;
    }
    r = status::no_memory;
  }
  if (!ok(r)) unsent(index, r);
}

// A relay UCX refused: answered now, or, with hold_on_loss, the connection counts as lost and the
// IO is held for the reconnect with the others.
void zero_copy_worker::io_path::unsent(uint32_t index, status why) noexcept {
  if (hold_on_loss_ && why != status::no_memory) {
    requests_[index].relaying = false;
    requests_[index].queued = false;
    lose(why);
    return;
  }
  fail_unsent(requests_[index], why);
}

// A relay that never left (UCX refused it, or it was still queued): the target cannot have it,
// so it is answered now. An answer the target forged for it meanwhile was refused (queued).
void zero_copy_worker::io_path::fail_unsent(request_slot& s, status why) noexcept {
  s.queued = false;
  s.relaying = false;
  if (s.awaiting) {
    s.awaiting = false;
    --awaiting_;
    answer_failure(static_cast<uint32_t>(&s - requests_.data()), why);
  }
}

void zero_copy_worker::io_path::on_request_receive_failed(request_slot& s, status why) noexcept {
  if (!serving_) return;  // a stop flushes the posted receives
  note_error("comch receive failed", why);
  if (consumer_->state() == core::context_state::running) post_request_receive(s);
}

void zero_copy_worker::io_path::on_relayed(request_slot& s) noexcept {
  s.relaying = false;
  recycle_if_done(s);
}

// A send the target refused on a live connection (no posted receive, too big) never reached it:
// answered now. Any other failure (time-out, reset) may have reached it: held until fenced.
void zero_copy_worker::io_path::on_relay_failed(request_slot& s, status why) noexcept {
  s.relaying = false;
  const bool refused = control_ && control_->state() == core::context_state::running &&
                       (why == status::empty || why == status::too_big);
  if (refused && s.awaiting) {
    s.awaiting = false;
    --awaiting_;
    answer_failure(static_cast<uint32_t>(&s - requests_.data()), why);
    return;
  }
  if (!fencing_) lose(why);
  recycle_if_done(s);
}

// The host gets A_i back as a result carrying the failure, its own user_data and every other
// field unchanged, so its transaction ends instead of hanging. Only for IOs the target cannot
// act on: never relayed, refused, or relayed over connections fenced since.
void zero_copy_worker::io_path::answer_failure(uint32_t index, status why) noexcept {
  request_slot& s = requests_[index];
  note_error("IO not served by the target", why);
  io_message_view msg(s.message->head());
  msg.set_user_data(s.host_user_data);
  msg.set_type(io_message_type::result);
  msg.set_result(why);
  s.answering = true;
  send_to_host(transactions_ + index);
}

void zero_copy_worker::io_path::on_failure_answered(request_slot& s, bool delivered) noexcept {
  if (delivered) ++operations_;
  io_done();
  s.answering = false;
  recycle_if_done(s);
}

void zero_copy_worker::io_path::recycle_if_done(request_slot& s) noexcept {
  if (!s.busy || s.relaying || s.awaiting || s.answering) return;
  s.busy = false;
  post_request_receive(s);
}

void zero_copy_worker::io_path::lose(status why) noexcept {
  if (lost_) return;
  lost_ = true;
  rdma_lost_.store(true, std::memory_order_relaxed);
  ZC_LOG_ERROR("worker {}: the target failed ({}): fencing it; {} IOs wait for the fence", cpu_,
               status_name(why), awaiting_);
  // Requests UCX never took cannot reach the target: answered now, or held for resume().
  while (!relays_.empty()) {
    request_slot& s = requests_[relays_.front()];
    relays_.pop();
    if (hold_on_loss_) {
      s.queued = false;
      s.relaying = false;
    } else {
      fail_unsent(s, status::not_connected);
    }
  }
  stop_rdma();
}

void zero_copy_worker::io_path::rearm() {
  if (!rdma_stopped())
    throw status_error(status::bad_state,
                       fmt::format("worker on cpu {}: rdma contexts not stopped", cpu_));
  release_transport();
  build_rdma();
}

void zero_copy_worker::io_path::release_transport() noexcept {
  if (!control_ && !data_) return;
  // Idle contexts hold no task in flight: their tasks (relays, response receives) go with them,
  // and no slot keeps a pointer to one (a build that fails part way leaves none dangling).
  for (auto& r : requests_) r.relay = nullptr;
  for (auto& p : responses_) p.receive = nullptr;
  control_.reset();
  data_.reset();
  // The engine forgets the worker, the last reference to it: it goes now, and what UCX held
  // with it (the next contexts get a new one).
  rdma::renew_transport(engine_, device_);
}

uint32_t zero_copy_worker::io_path::resume() noexcept {
  if (!rdma_running()) {
    // A new connection failed before it served anything: still lost (rdma_lost() says so), the
    // IOs still held, for the next reconnect.
    ZC_LOG_ERROR("worker {}: a new rdma connection failed before use; IOs stay held", cpu_);
    return 0;
  }
  lost_ = false;
  fencing_ = false;
  rdma_lost_.store(false, std::memory_order_relaxed);
  for (auto& p : responses_)
    if (!p.forwarding) post_response_receive(p);
  uint32_t reissued = 0;
  for (uint32_t index = 0; index < transactions_; ++index) {
    request_slot& s = requests_[index];
    if (!s.awaiting || s.relaying) continue;
    ++s.generation;
    io_message_view msg(s.message->head());
    msg.set_user_data(tag_of(index, s.generation));
    s.relaying = true;
    s.deadline = msg.type() == io_message_type::flush ? core::steady_clock::time_point::max()
                                                      : engine_.coarse_time() + io_timeout_;
    if (s.deadline < next_check_) next_check_ = s.deadline;
    ++reissued;
    relay(index);
  }
  ZC_LOG_INFO("worker {}: {} IOs held since the loss relayed again", cpu_, reissued);
  return reissued;
}

void zero_copy_worker::io_path::answer_held(status why) noexcept {
  for (auto& s : requests_) {
    if (!s.awaiting || s.relaying) continue;
    s.awaiting = false;
    --awaiting_;
    answer_failure(static_cast<uint32_t>(&s - requests_.data()), why);
  }
}

void zero_copy_worker::io_path::check_deadlines(core::steady_clock::time_point now) noexcept {
  if (awaiting_ == 0 || lost_ || now < next_check_) return;
  next_check_ = core::steady_clock::time_point::max();
  for (const auto& s : requests_) {
    if (!s.awaiting) continue;
    if (s.deadline <= now) {
      ZC_LOG_ERROR("worker {}: the target left an IO unanswered for {} ms", cpu_,
                   io_timeout_.count());
      lose(status::time_out);
      return;
    }
    if (s.deadline < next_check_) next_check_ = s.deadline;
  }
}

// ---- response path: target -> rdma receive B_j -> comch send B_j -> receive B_j again

void zero_copy_worker::io_path::post_response_receive(response_slot& s) noexcept {
  (void)s.message->set_data(s.message->head(), 0);
  if (!serving_ && in_flight_ == 0) return;
  // Fenced (or released): resume() posts every receive on the new contexts.
  if (lost_ || fencing_ || !control_) return;
  if (status r = control_->submit(*s.receive); !ok(r)) note_error("cannot post rdma receive", r);
}

// Only an answer to an IO this worker relayed and still awaits goes to the host, with the host's
// user_data put back; anything else (late, repeated, forged) is counted and dropped.
void zero_copy_worker::io_path::on_response(uint32_t index) noexcept {
  response_slot& p = responses_[index];
  if (p.receive->received_length() != io_message_size) {
    note_error("target response of the wrong length refused", status::invalid_value);
    post_response_receive(p);
    return;
  }
  io_message_view msg(p.message->head());
  const uint64_t tag = msg.user_data();
  const uint32_t slot = static_cast<uint32_t>(tag);
  if (slot >= transactions_ || !requests_[slot].awaiting || requests_[slot].queued ||
      requests_[slot].generation != static_cast<uint32_t>(tag >> 32)) {
    note_error("target response that matches no IO in flight dropped", status::unexpected);
    post_response_receive(p);
    return;
  }
  request_slot& s = requests_[slot];
  // A transfer that failed on its way (IO_FAILED for a read, a write or an allocation map's
  // bitmap) may still have bytes in flight on io_data, which is not ordered with io_control: the
  // IO is held, and the target is fenced before it is answered, like one the target never
  // answered.
  const auto type = io_message_view(s.message->head()).type();
  if (msg.result() == status::io_failed &&
      (type == io_message_type::read || type == io_message_type::write ||
       type == io_message_type::allocation_map)) {
    post_response_receive(p);
    lose(status::io_failed);
    return;
  }
  s.awaiting = false;
  --awaiting_;
  msg.set_user_data(s.host_user_data);
  // The target's result goes to the host unchanged (the reference forced SUCCESS, §8.3).
  p.forwarding = true;
  send_to_host(index);
  recycle_if_done(s);
}

void zero_copy_worker::io_path::on_response_receive_failed(response_slot& s, status why) noexcept {
  if (!serving_ || fencing_ || lost_) return;  // a stop or a fence flushes the posted receives
  note_error("rdma receive failed", why);
  if (control_ && control_->state() == core::context_state::running) post_response_receive(s);
}

void zero_copy_worker::io_path::on_forwarded(response_slot& s, bool delivered) noexcept {
  s.forwarding = false;
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
  while (!relays_.empty() && !lost_ && control_) {
    const uint32_t index = relays_.front();
    const status r = control_->submit(*requests_[index].relay);
    if (r == status::again) break;
    relays_.pop();
    requests_[index].queued = false;
    ++sent;
    if (!ok(r)) unsent(index, r);
  }
  while (!backlog_.empty()) {
    const uint32_t key = backlog_.front();
    status r = submit_to_host(key);
    if (r == status::again) break;
    backlog_.pop();
    ++sent;
    if (!ok(r)) host_send_failed(key, r);
  }
  backlog_retry_ = sent != 0 ? backlog_retry_min : std::min(2 * backlog_retry_, backlog_retry_max);
  check_deadlines(engine_.coarse_time());
  return sent;
}

core::steady_clock::time_point zero_copy_worker::io_path::next_deadline() const {
  auto next = awaiting_ != 0 && !lost_ ? next_check_ : core::steady_clock::time_point::max();
  if (!relays_.empty()) next = std::min(next, core::steady_clock::now() + relay_retry);
  if (!backlog_.empty()) next = std::min(next, core::steady_clock::now() + backlog_retry_);
  return next;
}

// ---- zero_copy_worker: the control thread's side

zero_copy_worker::zero_copy_worker(uint32_t cpu, core::poll_mode mode, const core::device& device,
                                   comch::connection& conn, uint32_t transactions,
                                   zero_copy_worker_limits limits, bool hold_on_loss)
    : cpu_(cpu), host_(cpu, mode, limits) {
  if (transactions == 0 || transactions > max_worker_transactions)
    throw status_error(status::invalid_value, fmt::format("transaction count {} is outside 1..{}",
                                                          transactions, max_worker_transactions));
  // By value: a build that outlives this wait must not read this constructor's frame.
  host_.build([cpu, engine = &host_.engine(), device = &device, conn = &conn, transactions,
               io_timeout = limits.io, hold_on_loss] {
    return std::make_unique<io_path>(cpu, *engine, *device, *conn, transactions, io_timeout,
                                     hold_on_loss);
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

void zero_copy_worker::close_comch() {
  host_.close_comch();
}

void zero_copy_worker::hold() {
  host_.call([](io_path& io) { io.hold(); });
}

void zero_copy_worker::rearm() {
  host_.call([](io_path& io) { io.rearm(); });
}

uint32_t zero_copy_worker::resume() {
  return host_.call([](io_path& io) { return io.resume(); });
}

bool zero_copy_worker::rdma_lost() const noexcept {
  return host_.rdma_lost();
}

zero_copy_worker_stats zero_copy_worker::stats() {
  return host_.call([](io_path& io) { return io.stats(); });
}

template class worker_host<zero_copy_worker::io_path>;

}  // namespace zc::service
