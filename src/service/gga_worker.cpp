#include "service/gga_worker.hpp"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <memory>
#include <span>

#include "accel/dma_engine.hpp"
#include "accel/lz4_engine.hpp"
#include "comch/consumer.hpp"
#include "comch/producer.hpp"
#include "core/buffer.hpp"
#include "core/crc32c.hpp"
#include "core/log.hpp"
#include "rdma/context.hpp"
#include "service/retry_queue.hpp"
#include "storage/io_message.hpp"

namespace zc::service {

using storage::io_message_size;
using storage::io_message_type;
using storage::io_message_view;

namespace {
constexpr auto backlog_retry = std::chrono::milliseconds(1);
constexpr auto teardown_limit = std::chrono::milliseconds(2000);
// A flush's deadline, in storage timeouts (a host gives up on an IO after two).
constexpr int flush_deadline_factor = 4;
// How often transactions waiting for a target are checked against their deadline.
constexpr auto deadline_sweep = std::chrono::milliseconds(100);
// Chunk views per transaction: d1, d2, parity, plain block, image, host pages.
constexpr uint32_t chunk_views = 6;
// The shortest host IO message that can be answered: type, padding and user_data.
constexpr uint32_t answerable_length = 16;
// Message buffers per transaction: the host's request, one request per target, one response
// receive per target.
constexpr uint32_t messages_per_transaction = 1 + 2 * gga_target_count;
}  // namespace

class gga_worker::io_path final : public core::event_source {
 public:
  using label_bytes = gga_worker::label_bytes;
  io_path(uint32_t cpu, core::progress_engine& engine, const core::device& device,
          comch::connection& conn, uint32_t transactions, const gga_worker_config& config);
  ~io_path() override;

  uint32_t consumer_id() const noexcept { return consumer_->id(); }
  std::vector<uint8_t> export_connection(uint32_t target, storage::rdma_role role) {
    return context_of(target, role).export_connection();
  }
  void connect(uint32_t target, storage::rdma_role role, std::span<const uint8_t> blob);
  bool ready() const noexcept;
  void start_serving(uint32_t host_consumer);
  void begin_rebuild(uint64_t first, uint64_t end, uint64_t bytes_per_second) noexcept;
  bool rebuild_running() const noexcept { return rebuilding_; }
  // The targets' rdma connections are up (what label IO needs).
  bool storage_ready() const noexcept;
  bool begin_label_io(bool write, const std::array<label_bytes, gga_target_count>& labels,
                      uint8_t targets) noexcept;
  bool label_io_done() const noexcept { return !label_pending_; }
  std::array<std::optional<label_bytes>, gga_target_count> label_io_result() const;
  void stop_serving() noexcept {
    serving_ = false;
    storage_armed_ = false;
  }
  uint32_t in_flight() const noexcept { return in_flight_; }
  void stop_rdma() noexcept {
    for (auto& c : control_) (void)c->stop();
    for (auto& c : data_) (void)c->stop();
  }
  bool rdma_stopped() const noexcept {
    for (auto& c : control_)
      if (c->state() != core::context_state::idle) return false;
    for (auto& c : data_)
      if (c->state() != core::context_state::idle) return false;
    return true;
  }
  void stop_comch() noexcept {
    (void)consumer_->stop();
    (void)producer_->stop();
  }
  bool comch_stopped() const noexcept {
    return consumer_->state() == core::context_state::idle &&
           producer_->state() == core::context_state::idle;
  }
  // Unusable: two targets or more lost (one is served degraded).
  bool rdma_lost() const noexcept {
    return std::popcount(lost_published_.load(std::memory_order_relaxed)) >= 2;
  }
  uint8_t lost_targets() const noexcept { return lost_published_.load(std::memory_order_relaxed); }
  // The control thread heard that `target` is gone (its control connection failed).
  void lose_target(uint32_t target) noexcept { suspect(target); }
  gga_worker_stats stats() const noexcept {
    return {cpu_,      operations_, forced_,        errors_,     engine_.hits(),   engine_.misses(),
            verified_, repaired_,   unrecoverable_, raw_writes_, degraded_writes_, rebuilds_};
  }

  size_t poll() override;
  core::steady_clock::time_point next_deadline() const override {
    if (suspects_ != 0) return core::steady_clock::now();
    if (!backlog_.empty() || !resends_.empty()) return core::steady_clock::now() + backlog_retry;
    const auto sweep = in_flight_ != 0 ? next_sweep_ : core::steady_clock::time_point::max();
    if (rebuilding_ && serving_ && txns_[host_transactions_].op == operation::none)
      return std::min(sweep, rebuild_due_);
    return sweep;
  }

 private:
  enum class operation : uint8_t { none, read, write, flush, label };
  // One host IO in flight: its request buffer (answered in place), its chunk, its progress.
  struct transaction {
    core::buffer* host_message = nullptr;
    comch::consumer_post_recv_task* receive = nullptr;
    comch::producer_send_task* reply = nullptr;
    std::array<core::buffer*, gga_target_count> request{};
    std::array<rdma::send_task*, gga_target_count> send{};
    uint8_t* chunk = nullptr;
    uint64_t chunk_offset = 0;  // in the service region, for the targets' requester_offset
    core::buffer* d1 = nullptr;
    core::buffer* d2 = nullptr;
    core::buffer* parity = nullptr;
    core::buffer* plain = nullptr;  // chunk[0, B) as data: the DMA'd block, compressor input
    core::buffer* image = nullptr;  // chunk[0, B) as destination: the image
    core::buffer* host = nullptr;   // the host region; data set per block
    operation op = operation::none;
    gga_io_plan plan;
    uint32_t block = 0;
    int forced = -1;       // stripe index of the half a recovery read (§6.3) rebuilds, -1: none
    uint32_t sending = 0;  // rdma sends not completed yet
    uint8_t awaiting = 0;  // targets whose response is due (bit per target)
    uint8_t asked = 0;     // targets asked in this step
    uint8_t answered = 0;  // targets that answered this step with success
    // A block read (v2 verifies each): the slots in the chunk that hold what their target has,
    // the targets that refused their slot, the pairs tried (bit: the target a pair leaves out),
    // the pair being decoded and its entry; repair: 1 + the target whose slot is rewritten.
    uint8_t have = 0;
    uint8_t refused = 0;
    uint8_t tried = 0;
    uint8_t pair = 0;
    uint8_t repair = 0;
    accel::gga_pair_verdict verdict = accel::gga_pair_verdict::lz4;
    accel::gga_entry entry;
    // A block write: how it is stored and the crc32c of its plain bytes.
    accel::gga_stored_as stored_as = accel::gga_stored_as::lz4;
    uint32_t crc = 0;
    bool retired = false;  // not used again: a target may still touch its chunk
    bool issuing = false;  // a step's requests are being sent: not settled before all are out
    uint32_t step = 0;     // stamps this step's requests: an older step's answer is not taken
    core::steady_clock::time_point deadline{};  // for this step's responses
    status result = status::success;
  };
  struct response_slot {
    core::buffer* message = nullptr;
    rdma::receive_task* receive = nullptr;
  };

  rdma::context& context_of(uint32_t target, storage::rdma_role role) {
    if (target >= gga_target_count)
      throw status_error(status::invalid_value, fmt::format("no storage target {}", target));
    return role == storage::rdma_role::io_control ? *control_[target] : *data_[target];
  }
  static uint64_t index_of(const core::task_base& t) noexcept { return t.get_user_data().u64; }
  void note_error(const char* what, status s) noexcept;
  // A bad slot found by a v2 read: logged (the first at warning level), not an error of the
  // host's IO, which the stripe's other pair may still serve.
  void note_fault(const char* what, status s) noexcept;

  // Host side.
  void post_host_receive(transaction& t) noexcept;
  void on_host_request(transaction& t) noexcept;
  void finish(transaction& t, status result) noexcept;
  void send_reply(uint32_t index) noexcept;
  void on_replied(transaction& t, bool delivered) noexcept;
  // Steps of a transaction.
  void next_block(transaction& t) noexcept;
  void ask_half(transaction& t, uint32_t target) noexcept;
  void issue(transaction& t, uint32_t target, io_message_type type, uint32_t io_size,
             uint64_t chunk_part, uint64_t storage_offset) noexcept;
  void submit_storage(uint32_t index, uint32_t target) noexcept;
  void storage_send_failed(uint32_t index, uint32_t target, status why) noexcept;
  void on_storage_sent(transaction& t) noexcept;
  void on_storage_response(uint32_t target, uint32_t slot) noexcept;
  void settle(transaction& t) noexcept;
  void begin_step(transaction& t) noexcept;
  size_t sweep_deadlines() noexcept;
  void settle_read(transaction& t) noexcept;
  bool try_pair(transaction& t, uint32_t left_out) noexcept;
  void recover(transaction& t, uint32_t lost_half) noexcept;
  void decode(transaction& t) noexcept;
  void decompress(transaction& t) noexcept;
  void copy_to_host(transaction& t) noexcept;
  void check_block(transaction& t) noexcept;
  void repair(transaction& t, uint32_t target) noexcept;
  void write_repair(transaction& t) noexcept;
  void finish_repair(transaction& t) noexcept;
  void block_done(transaction& t) noexcept;
  size_t rebuild_step() noexcept;
  void rebuild_block_done(transaction& t, status result) noexcept;
  bool is_rebuild(const transaction& t) const noexcept { return index(t) == host_transactions_; }
  void dma_from_host(transaction& t) noexcept;
  void compress(transaction& t) noexcept;
  void encode(transaction& t) noexcept;
  void write_halves(transaction& t) noexcept;
  bool write_allowed(transaction& t) noexcept;
  uint8_t* host_block(const transaction& t) const noexcept {
    if (is_rebuild(t)) return scratch_->data();
    return config_.host->data() + t.plan.host_offset + uint64_t(t.block) * block_size();
  }
  uint64_t slot_offset(const transaction& t) const noexcept {
    return t.plan.target_offset + uint64_t(t.block) * layout_.slots().slot();
  }
  void fail(transaction& t, const char* what, status why) noexcept;
  void post_response_receive(uint32_t target, response_slot& s) noexcept;
  // Posts every response receive once (label IO comes before start_serving).
  void arm_storage() noexcept;
  // Degraded mode: a target that failed (its rdma connection, a send, a receive) or did not
  // answer in time is suspected at once, from any callback; poll() then marks it lost for good,
  // fences it (stops both its contexts) and settles the transactions that waited for it.
  void suspect(uint32_t target) noexcept {
    if (target < gga_target_count && (lost_ & (1u << target)) == 0)
      suspects_ = static_cast<uint8_t>(suspects_ | (1u << target));
  }
  size_t take_suspects() noexcept;
  bool is_lost(uint32_t target) const noexcept { return (lost_ & (1u << target)) != 0; }
  uint32_t index(const transaction& t) const noexcept {
    return static_cast<uint32_t>(&t - txns_.data());
  }
  uint32_t half() const noexcept { return config_.geometry.half(); }
  uint32_t block_size() const noexcept { return config_.geometry.block_size; }
  bool verified() const noexcept { return config_.geometry.verified(); }

  const uint32_t cpu_;
  core::progress_engine& engine_;
  const uint32_t transactions_;       // the host's, then the rebuild's
  const uint32_t host_transactions_;  // N
  const gga_worker_config config_;
  const gga_chunk_layout layout_;
  gga_recovery_trigger trigger_;
  bool serving_ = false;
  bool attached_ = false;
  uint32_t in_flight_ = 0;
  uint64_t operations_ = 0;
  uint64_t rebuilds_ = 0;  // EC recoveries the trigger did not ask for (a lost target, a bad slot)
  uint64_t errors_ = 0;
  uint64_t retired_ = 0;        // transaction slots given up after a storage timeout
  uint64_t forced_ = 0;         // recovery reads the trigger asked for (§6.3 picks the half by it)
  uint64_t verified_ = 0;       // block reads whose crc matched
  uint64_t repaired_ = 0;       // slots rewritten after a read found them bad
  uint64_t unrecoverable_ = 0;  // block reads no pair of slots could vouch for
  uint64_t raw_writes_ = 0;     // blocks stored raw (their LZ4 image did not fit)
  uint64_t degraded_writes_ = 0;            // blocks written to two targets, one being lost
  uint8_t lost_ = 0;                        // targets lost for good (bit per target); engine thread
  uint8_t suspects_ = 0;                    // targets to be marked lost by the next poll()
  std::atomic<uint8_t> lost_published_{0};  // lost_, for the control thread
  bool error_logged_ = false;
  bool storage_armed_ = false;  // response receives posted
  // The rebuild (begin_rebuild): blocks [next, end) left, one per interval.
  bool rebuilding_ = false;
  uint64_t rebuild_next_ = 0;
  uint64_t rebuild_end_ = 0;
  uint64_t rebuild_total_ = 0;
  uint64_t rebuild_checked_ = 0;
  uint64_t rebuild_repaired_at_start_ = 0;
  std::chrono::nanoseconds rebuild_interval_{0};
  core::steady_clock::time_point rebuild_due_{};
  std::unique_ptr<core::memory_map> scratch_;  // the rebuild's block
  bool label_pending_ = false;                 // a label IO in transaction 0
  uint8_t label_answered_ = 0;                 // its targets that answered with success
  bool fault_logged_ = false;
  std::unique_ptr<core::memory_map> messages_;
  core::buffer_inventory inventory_;
  std::vector<transaction> txns_;
  std::array<std::vector<response_slot>, gga_target_count> responses_;
  // Replies waiting for a posted host buffer (transaction indices), oldest first.
  retry_queue backlog_;
  // Storage requests UCX could not take yet: index * 3 + target, oldest first.
  retry_queue resends_;
  core::steady_clock::time_point next_sweep_{};
  // Declared last, destroyed first.
  std::unique_ptr<accel::lz4_engine> lz4_;
  std::unique_ptr<accel::ec_engine> ec_;
  std::unique_ptr<accel::dma_engine> dma_;
  std::unique_ptr<comch::consumer> consumer_;
  std::unique_ptr<comch::producer> producer_;
  std::array<std::unique_ptr<rdma::context>, gga_target_count> control_;
  std::array<std::unique_ptr<rdma::context>, gga_target_count> data_;
};

gga_worker::io_path::io_path(uint32_t cpu, core::progress_engine& engine,
                             const core::device& device, comch::connection& conn,
                             uint32_t transactions, const gga_worker_config& config)
    : cpu_(cpu),
      engine_(engine),
      transactions_(transactions + 1),
      host_transactions_(transactions),
      config_(config),
      layout_{config.geometry.block_size, config.geometry.entry},
      trigger_(config.recovery_every_n),
      messages_(core::memory_map::allocate(
          size_t(transactions + 1) * messages_per_transaction * io_message_size,
          core::access::local_read_write | core::access::pci_read_write)),
      inventory_((transactions + 1) * (messages_per_transaction + chunk_views) + 1),
      txns_(transactions + 1),
      backlog_(transactions),
      resends_(size_t(transactions + 1) * gga_target_count) {
  const gga_chunk_layout& layout = layout_;
  if (config_.host == nullptr || config_.region == nullptr || block_size() == 0)
    throw status_error(status::invalid_value, "gga worker without its memory or geometry");
  if (config_.first_chunk > config_.region->size() ||
      uint64_t(transactions_) * layout.size() > config_.region->size() - config_.first_chunk)
    throw status_error(status::invalid_value, "gga worker chunks outside the service region");

  consumer_ = std::make_unique<comch::consumer>(
      engine, conn,
      comch::consumer_config{
          .buffers = messages_.get(),
          .post_recv_tasks = transactions,
          .on_recv =
              [this](comch::consumer_post_recv_task& t) { on_host_request(txns_[index_of(t)]); },
          .on_recv_error =
              [this](comch::consumer_post_recv_task& t) {
                if (!serving_) return;
                note_error("comch receive failed", t.result());
                if (consumer_->state() == core::context_state::running)
                  post_host_receive(txns_[index_of(t)]);
              }});
  producer_ = std::make_unique<comch::producer>(
      engine, conn,
      comch::producer_config{
          .send_tasks = transactions,
          .on_send_done =
              [this](comch::producer_send_task& t) { on_replied(txns_[index_of(t)], true); },
          .on_send_error =
              [this](comch::producer_send_task& t) {
                note_error("reply not delivered to the host", t.result());
                on_replied(txns_[index_of(t)], false);
              }});
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    control_[k] = std::make_unique<rdma::context>(engine, device);
    data_[k] = std::make_unique<rdma::context>(engine, device);
    for (rdma::context* ctx : {control_[k].get(), data_[k].get()}) {
      // One timeout model (worker_host.hpp): a step's deadline is the control timeout; the rdma
      // task timeout, twice it, is only the transport's backstop.
      ctx->set_task_timeout(rdma_timeout_for(config_.storage_timeout));
      ctx->set_state_changed_callback(
          [this, k](core::context&, core::context_state previous, core::context_state next) {
            if (serving_ && previous == core::context_state::running &&
                next != core::context_state::running)
              suspect(k);
          });
    }
    control_[k]->set_permissions(core::access::local_read_only);
    // The targets write the halves they read into our chunks and read the halves they write.
    data_[k]->set_permissions(core::access::rdma_read | core::access::rdma_write);
    control_[k]->configure<rdma::send_task>(
        transactions_,
        [this](rdma::send_task& t) { on_storage_sent(txns_[index_of(t) / gga_target_count]); },
        [this](rdma::send_task& t) {
          const uint64_t key = index_of(t);
          const auto target = static_cast<uint32_t>(key % gga_target_count);
          // The target may have taken the request all the same: its chunk is not reused.
          txns_[key / gga_target_count].retired = true;
          // A send the transport gave up on: the connection is broken.
          suspect(target);
          storage_send_failed(static_cast<uint32_t>(key / gga_target_count), target, t.result());
        });
    control_[k]->configure<rdma::receive_task>(
        transactions_,
        [this, k](rdma::receive_task& t) {
          on_storage_response(k, static_cast<uint32_t>(index_of(t)));
        },
        [this, k](rdma::receive_task&) {
          // Receives fail only when the connection does (or at stop): not posted again.
          if (serving_) suspect(k);
        });
    responses_[k].resize(transactions_);
  }
  lz4_ = std::make_unique<accel::lz4_engine>(
      engine, accel::lz4_engine_config{.compress_tasks = transactions_,
                                       .decompress_tasks = transactions_,
                                       .max_block_size = block_size(),
                                       .on_compress_done =
                                           [this](accel::lz4_compress_task& task) {
                                             transaction& t = txns_[index_of(task)];
                                             task.free();
                                             t.stored_as = accel::gga_stored_as::lz4;
                                             encode(t);
                                           },
                                       .on_compress_error =
                                           [this](accel::lz4_compress_task& task) {
                                             transaction& t = txns_[index_of(task)];
                                             const status why = task.result();
                                             task.free();
                                             // v2 stores such a block raw: the image area still
                                             // holds the plain block (nothing is written on
                                             // too_big). v1 cannot store it; the reference stopped
                                             // the whole worker here (§6.4, §8.4).
                                             if (why == status::too_big && verified()) {
                                               t.stored_as = accel::gga_stored_as::raw;
                                               ++raw_writes_;
                                               encode(t);
                                               return;
                                             }
                                             fail(t, "block not compressible enough",
                                                  why == status::too_big ? status::io_failed : why);
                                           },
                                       .on_decompress_done =
                                           [this](accel::lz4_decompress_task& task) {
                                             transaction& t = txns_[index_of(task)];
                                             task.free();
                                             check_block(t);
                                           },
                                       .on_decompress_error =
                                           [this](accel::lz4_decompress_task& task) {
                                             transaction& t = txns_[index_of(task)];
                                             const status why = task.result();
                                             task.free();
                                             if (!verified()) {
                                               fail(t, "bad block image from storage", why);
                                               return;
                                             }
                                             // Another pair of the stripe may give it.
                                             note_fault("bad block image from storage", why);
                                             settle_read(t);
                                           }});
  ec_ = std::make_unique<accel::ec_engine>(
      engine, accel::ec_engine_config{.create_tasks = transactions_,
                                      .recover_tasks = transactions_,
                                      .on_create_done =
                                          [this](accel::ec_create_task& task) {
                                            transaction& t = txns_[index_of(task)];
                                            task.free();
                                            if (t.op == operation::read)
                                              write_repair(t);  // a parity half rebuilt
                                            else
                                              write_halves(t);
                                          },
                                      .on_create_error =
                                          [this](accel::ec_create_task& task) {
                                            transaction& t = txns_[index_of(task)];
                                            const status why = task.result();
                                            task.free();
                                            fail(t, "EC create failed", why);
                                          },
                                      .on_recover_done =
                                          [this](accel::ec_recover_task& task) {
                                            transaction& t = txns_[index_of(task)];
                                            task.free();
                                            decode(t);
                                          },
                                      .on_recover_error =
                                          [this](accel::ec_recover_task& task) {
                                            transaction& t = txns_[index_of(task)];
                                            const status why = task.result();
                                            task.free();
                                            fail(t, "EC recovery failed", why);
                                          }});
  dma_ = std::make_unique<accel::dma_engine>(
      engine, accel::dma_engine_config{
                  .memcpy_tasks = transactions_,
                  .on_memcpy_done =
                      [this](accel::dma_memcpy_task& task) {
                        transaction& t = txns_[index_of(task)];
                        task.free();
                        if (t.op == operation::read) {
                          check_block(t);  // a raw block copied out
                          return;
                        }
                        if (verified())
                          t.crc = core::crc32c({t.chunk + layout_.image(), block_size()});
                        compress(t);
                      },
                  .on_memcpy_error =
                      [this](accel::dma_memcpy_task& task) {
                        transaction& t = txns_[index_of(task)];
                        const status why = task.result();
                        task.free();
                        fail(t, "DMA from the host failed", why);
                      }});

  uint8_t* base = messages_->data();
  auto message_at = [&](size_t slot) {
    core::buffer* b = nullptr;
    throw_if_failed(
        inventory_.get_by_addr(*messages_, base + slot * io_message_size, io_message_size, b),
        "message buffer");
    return b;
  };
  auto view = [&](core::memory_map& map, uint8_t* at, size_t length) {
    core::buffer* b = nullptr;
    throw_if_failed(inventory_.get_by_addr(map, at, length, b), "chunk buffer");
    return b;
  };
  // The last transaction is the rebuild's: no host message, its block lands in scratch memory.
  scratch_ = core::memory_map::allocate(block_size(), core::access::local_read_write);
  for (uint32_t i = 0; i < transactions_; ++i) {
    transaction& t = txns_[i];
    const size_t first = size_t(i) * messages_per_transaction;
    t.host_message = message_at(first);
    if (i < host_transactions_) {
      t.receive = consumer_->allocate_post_recv(*t.host_message);
      t.reply = producer_->allocate_send(*t.host_message, 0);
      if (t.receive == nullptr || t.reply == nullptr)
        throw status_error(status::no_memory, "comch tasks");
      t.receive->set_user_data(core::make_user_data(i));
      t.reply->set_user_data(core::make_user_data(i));
    }
    for (uint32_t k = 0; k < gga_target_count; ++k) {
      t.request[k] = message_at(first + 1 + k);
      throw_if_failed(
          control_[k]->allocate(core::make_user_data(i * gga_target_count + k), t.send[k]),
          "rdma send task");
      t.send[k]->set_src(*t.request[k]);
      response_slot& r = responses_[k][i];
      r.message = message_at(first + 1 + gga_target_count + k);
      throw_if_failed(control_[k]->allocate(core::make_user_data(i), r.receive),
                      "rdma receive task");
      r.receive->set_dst(*r.message);
    }
    t.chunk_offset = config_.first_chunk + uint64_t(i) * layout.size();
    t.chunk = config_.region->data() + t.chunk_offset;
    t.d1 = view(*config_.region, t.chunk + layout.d1(), half());
    t.d2 = view(*config_.region, t.chunk + layout.d2(), half());
    t.parity = view(*config_.region, t.chunk + layout.parity(), half());
    t.plain = view(*config_.region, t.chunk + layout.image(), block_size());
    t.image = view(*config_.region, t.chunk + layout.image(), block_size());
    t.host = i < host_transactions_
                 ? view(*config_.host, config_.host->data(), config_.host->size())
                 : view(*scratch_, scratch_->data(), scratch_->size());
  }
  throw_if_failed(consumer_->start(), "start comch consumer");
  throw_if_failed(producer_->start(), "start comch producer");
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    throw_if_failed(control_[k]->start(), "start io_control context");
    throw_if_failed(data_[k]->start(), "start io_data context");
  }
  throw_if_failed(lz4_->start(), "start lz4 engine");
  throw_if_failed(ec_->start(), "start ec engine");
  throw_if_failed(dma_->start(), "start dma engine");
  engine_.attach(*this);
  attached_ = true;
}

gga_worker::io_path::~io_path() {
  serving_ = false;
  if (attached_) engine_.detach(*this);
  (void)lz4_->stop();
  (void)ec_->stop();
  (void)dma_->stop();
  stop_comch();
  stop_rdma();
  auto engines_idle = [this] {
    return lz4_->state() == core::context_state::idle &&
           ec_->state() == core::context_state::idle && dma_->state() == core::context_state::idle;
  };
  engine_.run_until([&] { return comch_stopped() && rdma_stopped() && engines_idle(); },
                    teardown_limit);
  if (!comch_stopped() || !rdma_stopped()) {
    // A transport may still touch the message buffers: they stay mapped rather than be freed.
    ZC_LOG_ERROR("worker {}: endpoints did not stop in time; their message memory is kept", cpu_);
    (void)messages_.release();
  }
}

void gga_worker::io_path::connect(uint32_t target, storage::rdma_role role,
                                  std::span<const uint8_t> blob) {
  rdma::context& ctx = context_of(target, role);
  if (ctx.state() != core::context_state::starting)
    throw status_error(status::already_exist,
                       fmt::format("worker on cpu {} already has its {} connection to target {}",
                                   cpu_, storage::to_string(role), target));
  ctx.connect(blob);
}

bool gga_worker::io_path::ready() const noexcept {
  if (consumer_->state() != core::context_state::running ||
      producer_->state() != core::context_state::running)
    return false;
  for (uint32_t k = 0; k < gga_target_count; ++k)
    if (control_[k]->state() != core::context_state::running ||
        data_[k]->state() != core::context_state::running)
      return false;
  return true;
}

void gga_worker::io_path::start_serving(uint32_t host_consumer) {
  for (uint32_t i = 0; i < host_transactions_; ++i)
    txns_[i].reply->set(*txns_[i].host_message, host_consumer);
  serving_ = true;
  arm_storage();
  for (uint32_t i = 0; i < host_transactions_; ++i) post_host_receive(txns_[i]);
}

// ---- the rebuild: one block after the other in the last transaction, paced

void gga_worker::io_path::begin_rebuild(uint64_t first, uint64_t end,
                                        uint64_t bytes_per_second) noexcept {
  if (first >= end || bytes_per_second == 0) return;
  rebuild_next_ = first;
  rebuild_end_ = end;
  rebuild_total_ = end - first;
  rebuild_checked_ = 0;
  rebuild_repaired_at_start_ = repaired_;
  rebuild_interval_ = std::chrono::nanoseconds(
      std::max<uint64_t>(1, uint64_t(block_size()) * 1'000'000'000ull / bytes_per_second));
  rebuild_due_ = engine_.pass_time();
  rebuilding_ = true;
  ZC_LOG_INFO("worker {}: rebuild of blocks {}..{} begins", cpu_, first, end - 1);
}

// Every slot of the next block is read and checked, the bad or missing ones rewritten (as a
// host read would, check_block), at most one block per interval.
size_t gga_worker::io_path::rebuild_step() noexcept {
  transaction& t = txns_[host_transactions_];
  if (!rebuilding_ || !serving_ || t.op != operation::none) return 0;
  if (t.retired) {
    // A target left its block unanswered: its chunk is not used again, nor the rebuild.
    rebuilding_ = false;
    ZC_LOG_ERROR(
        "worker {}: rebuild stopped after {} of {} blocks: a storage target did not "
        "answer",
        cpu_, rebuild_checked_, rebuild_total_);
    return 0;
  }
  const auto now = engine_.pass_time();
  if (now < rebuild_due_) return 0;
  rebuild_due_ = std::max(rebuild_due_ + rebuild_interval_, now);
  ++in_flight_;
  t.plan = gga_io_plan{1, 0, rebuild_next_++ * layout_.slots().slot()};
  t.op = operation::read;
  t.result = status::success;
  t.block = 0;
  t.sending = 0;
  t.awaiting = 0;
  t.forced = -1;
  t.have = t.refused = t.tried = t.repair = 0;
  begin_step(t);
  for (uint32_t k = 0; k < gga_target_count; ++k)
    if (!is_lost(k)) ask_half(t, k);
  t.issuing = false;
  settle(t);
  return 1;
}

void gga_worker::io_path::rebuild_block_done(transaction& t, status result) noexcept {
  t.op = operation::none;
  if (in_flight_ > 0) --in_flight_;
  ++rebuild_checked_;
  if (!ok(result))
    ZC_LOG_ERROR("worker {}: rebuild: block at slot offset {} not rebuilt: {}", cpu_,
                 t.plan.target_offset, status_name(result));
  const uint64_t quarter = std::max<uint64_t>(1, rebuild_total_ / 4);
  if (rebuild_next_ == rebuild_end_) {
    rebuilding_ = false;
    ZC_LOG_INFO("worker {}: rebuild done: {} blocks checked, {} slots rewritten", cpu_,
                rebuild_checked_, repaired_ - rebuild_repaired_at_start_);
  } else if (rebuild_checked_ % quarter == 0) {
    ZC_LOG_INFO("worker {}: rebuild: {} of {} blocks checked", cpu_, rebuild_checked_,
                rebuild_total_);
  }
}

void gga_worker::io_path::arm_storage() noexcept {
  if (storage_armed_) return;
  storage_armed_ = true;
  for (uint32_t k = 0; k < gga_target_count; ++k)
    for (auto& r : responses_[k]) post_response_receive(k, r);
}

bool gga_worker::io_path::storage_ready() const noexcept {
  for (uint32_t k = 0; k < gga_target_count; ++k)
    if (control_[k]->state() != core::context_state::running ||
        data_[k]->state() != core::context_state::running)
      return false;
  return true;
}

// In transaction 0's chunk, each target's label in the place of its slot; settled by settle().
bool gga_worker::io_path::begin_label_io(bool write,
                                         const std::array<label_bytes, gga_target_count>& labels,
                                         uint8_t targets) noexcept {
  transaction& t = txns_[0];
  if (serving_ || label_pending_ || t.op != operation::none) return false;
  arm_storage();
  t.op = operation::label;
  t.result = status::success;
  t.sending = 0;
  t.awaiting = 0;
  label_pending_ = true;
  label_answered_ = 0;
  ++in_flight_;  // deadlines are swept while something is in flight
  begin_step(t);
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    if ((targets & (1u << k)) == 0 || is_lost(k)) continue;
    if (write) std::memcpy(t.chunk + layout_.slot_at(k), labels[k].data(), labels[k].size());
    issue(t, k, write ? io_message_type::write : io_message_type::read, accel::gga_label_size,
          layout_.slot_at(k), config_.geometry.label_at);
  }
  t.issuing = false;
  settle(t);
  return true;
}

std::array<std::optional<gga_worker::label_bytes>, gga_target_count>
gga_worker::io_path::label_io_result() const {
  std::array<std::optional<label_bytes>, gga_target_count> out;
  const uint8_t* chunk = txns_[0].chunk;
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    if ((label_answered_ & (1u << k)) == 0) continue;
    label_bytes b{};
    std::memcpy(b.data(), chunk + layout_.slot_at(k), b.size());
    out[k] = b;
  }
  return out;
}

void gga_worker::io_path::note_error(const char* what, status s) noexcept {
  ++errors_;
  if (!error_logged_) {
    error_logged_ = true;
    ZC_LOG_ERROR("worker {}: {}: {} (later errors are only counted)", cpu_, what, status_name(s));
  } else {
    ZC_LOG_DEBUG("worker {}: {}: {}", cpu_, what, status_name(s));
  }
}

void gga_worker::io_path::note_fault(const char* what, status s) noexcept {
  if (!fault_logged_) {
    fault_logged_ = true;
    ZC_LOG_WARN(
        "worker {}: {}: {}; the stripe's other slots serve the block (later ones are "
        "only counted)",
        cpu_, what, status_name(s));
  } else {
    ZC_LOG_DEBUG("worker {}: {}: {}", cpu_, what, status_name(s));
  }
}

// ---- the host's side: request in, one reply out, the receive posted again

void gga_worker::io_path::post_host_receive(transaction& t) noexcept {
  t.op = operation::none;
  (void)t.host_message->set_data(t.host_message->head(), 0);
  if (!serving_) return;
  if (status r = consumer_->submit(*t.receive); !ok(r)) note_error("cannot post comch receive", r);
}

void gga_worker::io_path::on_host_request(transaction& t) noexcept {
  if (!serving_) return;
  ++in_flight_;
  t.result = status::success;
  t.block = 0;
  t.sending = 0;
  t.awaiting = 0;
  t.forced = -1;
  if (const uint32_t length = t.receive->received_length(); length != io_message_size) {
    if (length < answerable_length) {
      // Too short to carry the host's user_data: nothing to answer; the buffer is reposted.
      note_error("IO message too short to answer dropped", status::invalid_value);
      --in_flight_;
      post_host_receive(t);
      return;
    }
    // Answered with the host's user_data; what it did not send reads as zeros.
    if (length < io_message_size)
      std::memset(t.host_message->head() + length, 0, io_message_size - length);
    fail(t, "IO message of the wrong length refused", status::invalid_value);
    return;
  }
  io_message_view msg(t.host_message->head());
  switch (msg.type()) {
    case io_message_type::read:
    case io_message_type::write: {
      std::string why;
      auto plan = plan_host_io(config_.geometry, config_.host->size(), msg.io_size(),
                               msg.requester_offset(), msg.storage_offset(), &why);
      if (!plan) {
        ZC_LOG_DEBUG("worker {}: IO refused: {}", cpu_, why);
        fail(t, "IO refused", status::invalid_value);
        return;
      }
      t.plan = *plan;
      t.op = msg.type() == io_message_type::read ? operation::read : operation::write;
      next_block(t);
      return;
    }
    case io_message_type::flush:
      // Every completed write of every target made durable (DESIGN §2), io_size 0.
      // Degraded, the two targets left hold every completed write (writes are refused then).
      t.op = operation::flush;
      begin_step(t);
      // A flush waits for the targets' storage (msync of a large backing file): it gets its own,
      // longer deadline, so a slow sync is not mistaken for a lost target.
      t.deadline = engine_.pass_time() + flush_deadline_factor * config_.storage_timeout;
      for (uint32_t k = 0; k < gga_target_count; ++k)
        if (!is_lost(k)) issue(t, k, io_message_type::flush, 0, 0, 0);
      t.issuing = false;
      settle(t);
      return;
    default:
      fail(t, "IO of an unknown type refused", status::invalid_value);
      return;
  }
}

void gga_worker::io_path::fail(transaction& t, const char* what, status why) noexcept {
  note_error(what, why);
  finish(t, why);
}

void gga_worker::io_path::finish(transaction& t, status result) noexcept {
  if (is_rebuild(t)) {
    rebuild_block_done(t, result);
    return;
  }
  io_message_view msg(t.host_message->head());
  msg.set_type(io_message_type::result);
  msg.set_result(result);
  send_reply(index(t));
}

void gga_worker::io_path::send_reply(uint32_t i) noexcept {
  status r = backlog_.empty() ? producer_->submit(*txns_[i].reply) : status::again;
  if (r == status::again) {
    if (backlog_.push(i)) return;
    r = status::no_memory;
  }
  if (!ok(r)) {
    note_error("reply not delivered to the host", r);
    on_replied(txns_[i], false);
  }
}

void gga_worker::io_path::on_replied(transaction& t, bool delivered) noexcept {
  if (delivered) ++operations_;
  if (in_flight_ > 0) --in_flight_;
  if (t.retired) {
    // Its chunk may still be read or written by a target that answers late: the slot is not
    // used again this session (the host keeps at least T of the 2T slots for a while; a target
    // that keeps timing out ends in a lost connection or an unusable worker, never in bytes of
    // one IO written into another).
    if (retired_++ == 0)
      ZC_LOG_WARN("worker {}: a transaction slot is retired after a storage timeout", cpu_);
    t.op = operation::none;
    return;
  }
  post_host_receive(t);
}

// ---- one block after the other

void gga_worker::io_path::next_block(transaction& t) noexcept {
  if (t.block == t.plan.blocks) {
    finish(t, t.result);
    return;
  }
  if (t.op == operation::read) {
    t.forced = trigger_.tick() ? static_cast<int>(gga_lost_half(++forced_)) : -1;
    t.have = t.refused = t.tried = t.repair = 0;
    begin_step(t);
    // Two halves of the three: both data halves, or for a recovery read (§6.3) the other data
    // half and the parity. A lost target's place is taken by the one not asked.
    uint8_t want = t.forced < 0 ? uint8_t(0b011) : uint8_t(0b111 & ~(1u << t.forced));
    for (uint32_t k = 0; k < gga_target_count; ++k) {
      if ((want & (1u << k)) == 0 || !is_lost(k)) continue;
      want = static_cast<uint8_t>((want & ~(1u << k)) | (0b111 & ~want));
    }
    for (uint32_t k = 0; k < gga_target_count; ++k)
      if ((want & (1u << k)) != 0 && !is_lost(k)) ask_half(t, k);
    t.issuing = false;
    settle(t);
    return;
  }
  if (!write_allowed(t)) return;
  dma_from_host(t);
}

// The target's whole slot, into its place in the chunk: in v2 its entry comes with its half.
void gga_worker::io_path::ask_half(transaction& t, uint32_t target) noexcept {
  issue(t, target, io_message_type::read, layout_.slots().slot(), layout_.slot_at(target),
        slot_offset(t));
}

void gga_worker::io_path::issue(transaction& t, uint32_t target, io_message_type type,
                                uint32_t io_size, uint64_t chunk_part,
                                uint64_t storage_offset) noexcept {
  io_message_view msg(t.request[target]->head());
  msg.set_type(type);
  // Our own transaction index (and step): the host's user_data stays in its buffer for the reply
  // (§3.2).
  msg.set_user_data(uint64_t(t.step) << 32 | index(t));
  msg.set_result(status::success);
  msg.set_io_size(io_size);
  msg.set_requester_offset(io_size == 0 ? 0 : t.chunk_offset + chunk_part);
  msg.set_storage_offset(storage_offset);
  (void)t.request[target]->set_data(t.request[target]->head(), io_message_size);
  ++t.sending;
  t.awaiting = static_cast<uint8_t>(t.awaiting | (1u << target));
  t.asked = static_cast<uint8_t>(t.asked | (1u << target));
  const uint32_t key = index(t) * gga_target_count + target;
  if (!resends_.empty()) {
    if (!resends_.push(key)) storage_send_failed(index(t), target, status::no_memory);
    return;
  }
  submit_storage(index(t), target);
}

void gga_worker::io_path::submit_storage(uint32_t i, uint32_t target) noexcept {
  const status r = control_[target]->submit(*txns_[i].send[target]);
  if (r == status::again) {
    if (!resends_.push(i * gga_target_count + target))
      storage_send_failed(i, target, status::no_memory);
    return;
  }
  if (!ok(r)) storage_send_failed(i, target, r);
}

// A request that never left gets no response either: both are settled now. A transport failure
// leaves the target suspected (the caller's doing) and the step short of its answer; a local one
// (no room to queue the send) fails the transaction.
void gga_worker::io_path::storage_send_failed(uint32_t i, uint32_t target, status why) noexcept {
  transaction& t = txns_[i];
  if (why == status::no_memory) {
    note_error("storage request not sent", why);
    if (t.result == status::success) t.result = why;
  } else {
    suspect(target);
  }
  const uint8_t bit = static_cast<uint8_t>(1u << target);
  if (t.sending > 0) --t.sending;
  t.awaiting = static_cast<uint8_t>(t.awaiting & ~bit);
  settle(t);
}

void gga_worker::io_path::on_storage_sent(transaction& t) noexcept {
  if (t.sending > 0) --t.sending;
  settle(t);
}

void gga_worker::io_path::on_storage_response(uint32_t target, uint32_t slot) noexcept {
  response_slot& r = responses_[target][slot];
  if (r.receive->received_length() != io_message_size) {
    note_error("storage response of the wrong length refused", status::invalid_value);
    post_response_receive(target, r);
    return;
  }
  io_message_view msg(r.message->head());
  const uint64_t i = msg.user_data() & UINT32_MAX;
  const uint32_t step = static_cast<uint32_t>(msg.user_data() >> 32);
  const status result = msg.result();
  const bool is_result = msg.type() == io_message_type::result;
  post_response_receive(target, r);
  // The index comes from a peer: checked before it is used (§8.4), and only a transaction that
  // waits for this target's answer takes it.
  const uint8_t bit = static_cast<uint8_t>(1u << target);
  if (i >= transactions_ || (txns_[i].awaiting & bit) == 0 || txns_[i].step != step || !is_result) {
    note_error("storage response for no waiting transaction dropped", status::invalid_value);
    return;
  }
  transaction& t = txns_[i];
  t.awaiting = static_cast<uint8_t>(t.awaiting & ~bit);
  if (ok(result)) {
    t.answered = static_cast<uint8_t>(t.answered | bit);
    if (t.op == operation::read) t.have = static_cast<uint8_t>(t.have | bit);
  } else if (t.op == operation::read) {
    // A slot the target could not read is missing, as a lost target's: the stripe's other pair
    // serves the block (a failed repair write only goes uncounted).
    t.refused = static_cast<uint8_t>(t.refused | bit);
  } else if (t.result == status::success) {
    // A target's failure becomes the host's result (the reference forced success, §8.3).
    t.result = result;
  }
  settle(t);
}

void gga_worker::io_path::post_response_receive(uint32_t target, response_slot& s) noexcept {
  (void)s.message->set_data(s.message->head(), 0);
  if (!storage_armed_) return;
  if (status r = control_[target]->submit(*s.receive); !ok(r))
    note_error("cannot post rdma receive", r);
}

// Every send and response of this step is in: on to the codec, or the next block.
void gga_worker::io_path::settle(transaction& t) noexcept {
  if (t.issuing || t.sending != 0 || t.awaiting != 0) return;
  if (t.op == operation::label) {
    // Not the host's: no reply. What answered is in the chunk.
    label_answered_ = t.answered;
    label_pending_ = false;
    t.op = operation::none;
    t.result = status::success;
    --in_flight_;
    return;
  }
  if (!ok(t.result)) {
    note_error("storage request failed", t.result);
    finish(t, t.result);
    return;
  }
  switch (t.op) {
    case operation::read:
      if (t.repair != 0)
        finish_repair(t);
      else
        settle_read(t);
      return;
    case operation::write:
      // Every slot written (v1), or in v2 every live target's and at least two: the stripe is
      // whole or, one target lost, readable from the two others.
      if (const uint8_t need = verified() ? uint8_t(0b111 & ~lost_) : uint8_t(0b111);
          (t.answered & need) != need || std::popcount(t.answered) < 2) {
        fail(t, "write lost a storage target half-way", status::io_failed);
        return;
      }
      if (t.answered != 0b111) ++degraded_writes_;
      ++t.block;
      next_block(t);
      return;
    default:
      // A flush: durable on two targets is enough to rebuild every block.
      if (std::popcount(t.answered) < 2) {
        fail(t, "flush reached fewer than two storage targets", status::not_connected);
        return;
      }
      finish(t, t.result);
      return;
  }
}

// Every answer of the block's step is in: decode the first pair of slots not tried yet that is
// here (the regular pair d1+d2 first, or for a recovery read, §6.3, the pair without the half it
// rebuilds), or ask for the slots an untried pair still needs, or give up. A pair is tried once:
// in v2 a pair whose entries disagree or whose block fails its crc leaves the next pair to try.
void gga_worker::io_path::settle_read(transaction& t) noexcept {
  const uint32_t first = t.forced < 0 ? uint32_t(gga_data_p) : uint32_t(t.forced);
  const std::array<uint32_t, 3> order{first, first == gga_data_p ? 1u : uint32_t(gga_data_p),
                                      first == 0 ? 1u : 0u};
  uint8_t reachable = 0;  // slots an untried pair could still use
  for (uint32_t left_out : order) {
    const uint8_t bit = static_cast<uint8_t>(1u << left_out);
    const uint8_t need = static_cast<uint8_t>(0b111 & ~bit);
    if ((t.tried & bit) != 0 || (need & (t.refused | lost_)) != 0) continue;
    if ((t.have & need) != need) {
      reachable = static_cast<uint8_t>(reachable | need);
      continue;
    }
    t.tried = static_cast<uint8_t>(t.tried | bit);
    if (try_pair(t, left_out)) return;
  }
  const uint8_t ask = static_cast<uint8_t>(reachable & ~t.have);
  if (ask != 0) {
    begin_step(t);
    for (uint32_t k = 0; k < gga_target_count; ++k)
      if ((ask & (1u << k)) != 0) ask_half(t, k);
    t.issuing = false;
    if (t.awaiting != 0 || t.sending != 0) return;
    // None could be sent: those targets are as good as refused.
    t.refused = static_cast<uint8_t>(t.refused | ask);
    settle_read(t);
    return;
  }
  if (t.tried == 0) {
    fail(t, "block read lost two storage targets", status::not_connected);
    return;
  }
  ++unrecoverable_;
  ZC_LOG_ERROR(
      "worker {}: block {} of storage offset {}: no pair of its slots gives a block "
      "that matches its checksum; the read fails",
      cpu_, t.block, t.plan.target_offset);
  fail(t, "block unrecoverable", status::io_failed);
}

// Decodes the pair of slots that leaves `left_out` out. False when its entries say that they are
// not of the same write (or are damaged): the caller tries another pair.
bool gga_worker::io_path::try_pair(transaction& t, uint32_t left_out) noexcept {
  t.pair = static_cast<uint8_t>(left_out);
  auto entry_of = [&](uint32_t k, accel::gga_entry& e) {
    return accel::decode_gga_entry(std::span<const uint8_t, accel::gga_entry_size>(
                                       t.chunk + layout_.entry_at(k), accel::gga_entry_size),
                                   accel::gga_role(k), e);
  };
  if (!verified()) {
    t.verdict = accel::gga_pair_verdict::lz4;
  } else {
    const uint32_t a = left_out == 0 ? 1 : 0, b = left_out == gga_data_p ? 1 : 2;
    accel::gga_entry ea, eb;
    if (!ok(entry_of(a, ea)) || !ok(entry_of(b, eb))) {
      note_fault("damaged block entry in a slot", status::invalid_value);
      return false;
    }
    t.verdict = accel::judge_gga_pair(ea, eb);
    if (t.verdict == accel::gga_pair_verdict::mismatch) return false;
    t.entry = ea;
  }
  if (t.verdict == accel::gga_pair_verdict::blank) {
    // Zeros only if the third slot is blank too (or cannot be read): two blank replacement
    // targets must not hide a block the third one holds.
    const uint8_t third = static_cast<uint8_t>(1u << left_out);
    if (!is_lost(left_out) && (t.refused & third) == 0) {
      if ((t.have & third) == 0) {
        t.tried = static_cast<uint8_t>(t.tried & ~third);  // tried again with the third slot in
        begin_step(t);
        ask_half(t, left_out);
        t.issuing = false;
        if (t.awaiting == 0 && t.sending == 0) t.refused = static_cast<uint8_t>(t.refused | third);
        settle(t);
        return true;
      }
      accel::gga_entry e;
      if (!ok(entry_of(left_out, e)) || e.stored_as != accel::gga_stored_as::none) return false;
    }
    std::memset(host_block(t), 0, block_size());  // never written: zeros
    block_done(t);
    return true;
  }
  if (left_out == gga_data_p) {
    decode(t);
  } else {
    // Rebuilt over the chunk's copy: that slot no longer holds what its target has.
    t.have = static_cast<uint8_t>(t.have & ~(1u << left_out));
    recover(t, left_out);
  }
  return true;
}

void gga_worker::io_path::recover(transaction& t, uint32_t lost_half) noexcept {
  if (t.forced != static_cast<int>(lost_half) || (t.tried & ~(1u << lost_half)) != 0) ++rebuilds_;
  const uint32_t h = half();
  (void)t.d1->set_data(t.d1->head(), lost_half == 0 ? 0 : h);
  (void)t.d2->set_data(t.d2->head(), lost_half == 1 ? 0 : h);
  (void)t.parity->set_data(t.parity->head(), h);
  // Survivors in stripe order; the rebuilt half lands in its own place in the chunk.
  accel::ec_recover_task* task =
      lost_half == 0 ? ec_->allocate_recover(config_.matrix, 0, *t.d2, *t.parity, *t.d1)
                     : ec_->allocate_recover(config_.matrix, 1, *t.d1, *t.parity, *t.d2);
  if (task == nullptr) {
    fail(t, "no EC recover task", status::no_memory);
    return;
  }
  task->set_user_data(core::make_user_data(index(t)));
  if (status r = ec_->submit(*task); !ok(r)) {
    task->free();
    fail(t, "EC recover not submitted", r);
  }
}

void gga_worker::io_path::decode(transaction& t) noexcept {
  if (t.verdict == accel::gga_pair_verdict::raw)
    copy_to_host(t);
  else
    decompress(t);
}

// The block is in the host's pages: in v2 it counts only if it matches the crc its entries
// carry; if not, the next pair is tried. A block served by a fallback pair has its bad slot
// rewritten before the next block.
void gga_worker::io_path::check_block(transaction& t) noexcept {
  if (!verified()) {
    block_done(t);
    return;
  }
  if (core::crc32c({host_block(t), block_size()}) != t.entry.crc) {
    note_fault("block does not match its checksum", status::io_failed);
    settle_read(t);
    return;
  }
  ++verified_;
  const uint32_t bad = t.pair;
  const uint8_t bit = static_cast<uint8_t>(1u << bad);
  // The slot left out is bad when an earlier pair with it failed or its target refused it; the
  // rebuild, which reads all three, also when its entry is not this write's (a blank
  // replacement's, a stale one).
  bool rewrite = (t.tried & ~bit) != 0 || (t.refused & bit) != 0;
  if (!rewrite && is_rebuild(t) && (t.have & bit) != 0) {
    accel::gga_entry e;
    rewrite =
        !ok(accel::decode_gga_entry(std::span<const uint8_t, accel::gga_entry_size>(
                                        t.chunk + layout_.entry_at(bad), accel::gga_entry_size),
                                    accel::gga_role(bad), e)) ||
        e.generation != t.entry.generation || e.crc != t.entry.crc ||
        e.stored_as != t.entry.stored_as;
  }
  if (rewrite && !is_lost(bad)) {
    repair(t, bad);
    return;
  }
  block_done(t);
}

// Rewrites `target`'s slot from the verified pair: the same entry with that target's role, and
// its half, which for a data half the recovery rebuilt in place, and for the parity is encoded
// again from both data halves.
void gga_worker::io_path::repair(transaction& t, uint32_t target) noexcept {
  t.repair = static_cast<uint8_t>(target + 1);
  accel::gga_entry e = t.entry;
  e.role = accel::gga_role(target);
  accel::encode_gga_entry(e, std::span<uint8_t, accel::gga_entry_size>(
                                 t.chunk + layout_.entry_at(target), accel::gga_entry_size));
  if (target == gga_data_p) {
    encode(t);
    return;
  }
  write_repair(t);
}

void gga_worker::io_path::write_repair(transaction& t) noexcept {
  const uint32_t target = t.repair - 1u;
  begin_step(t);
  issue(t, target, io_message_type::write, layout_.slots().slot(), layout_.slot_at(target),
        slot_offset(t));
  t.issuing = false;
  settle(t);
}

void gga_worker::io_path::finish_repair(transaction& t) noexcept {
  const uint32_t target = t.repair - 1u;
  t.repair = 0;
  const uint64_t at = slot_offset(t);
  if ((t.answered & (1u << target)) != 0) {
    ++repaired_;
    ZC_LOG_WARN("worker {}: storage target {}: slot at {} was bad and is rewritten", cpu_, target,
                at);
  } else {
    ZC_LOG_WARN("worker {}: storage target {}: slot at {} is bad and could not be rewritten", cpu_,
                target, at);
  }
  block_done(t);
}

void gga_worker::io_path::block_done(transaction& t) noexcept {
  ++t.block;
  next_block(t);
}

// Straight into the host's pages (§6.2): the image is checked by the decompressor, every length
// read from storage included.
void gga_worker::io_path::decompress(transaction& t) noexcept {
  (void)t.image->set_data(t.image->head(), block_size());
  (void)t.host->set_data(host_block(t), 0);
  accel::lz4_decompress_task* task = lz4_->allocate_decompress(*t.image, *t.host);
  if (task == nullptr) {
    fail(t, "no decompress task", status::no_memory);
    return;
  }
  task->set_user_data(core::make_user_data(index(t)));
  if (status r = lz4_->submit(*task); !ok(r)) {
    task->free();
    fail(t, "decompress not submitted", r);
  }
}

// A block stored raw: its image is the block.
void gga_worker::io_path::copy_to_host(transaction& t) noexcept {
  (void)t.image->set_data(t.image->head(), block_size());
  (void)t.host->set_data(host_block(t), 0);
  accel::dma_memcpy_task* task = dma_->allocate_memcpy(*t.image, *t.host);
  if (task == nullptr) {
    fail(t, "no DMA task", status::no_memory);
    return;
  }
  task->set_user_data(core::make_user_data(index(t)));
  if (status r = dma_->submit(*task); !ok(r)) {
    task->free();
    fail(t, "DMA not submitted", r);
  }
}

void gga_worker::io_path::dma_from_host(transaction& t) noexcept {
  (void)t.host->set_data(host_block(t), block_size());
  (void)t.plain->set_data(t.plain->head(), 0);
  accel::dma_memcpy_task* task = dma_->allocate_memcpy(*t.host, *t.plain);
  if (task == nullptr) {
    fail(t, "no DMA task", status::no_memory);
    return;
  }
  task->set_user_data(core::make_user_data(index(t)));
  if (status r = dma_->submit(*task); !ok(r)) {
    task->free();
    fail(t, "DMA not submitted", r);
  }
}

// In place: the engine compresses through its own scratch before it writes the image.
void gga_worker::io_path::compress(transaction& t) noexcept {
  (void)t.image->set_data(t.image->head(), 0);
  accel::lz4_compress_task* task = lz4_->allocate_compress(*t.plain, *t.image);
  if (task == nullptr) {
    fail(t, "no compress task", status::no_memory);
    return;
  }
  task->set_user_data(core::make_user_data(index(t)));
  if (status r = lz4_->submit(*task); !ok(r)) {
    task->free();
    fail(t, "compress not submitted", r);
  }
}

// The parity half, and in v2 the three entries of this write (a repair brings its own entry).
void gga_worker::io_path::encode(transaction& t) noexcept {
  if (verified() && t.op == operation::write) {
    const accel::gga_entry e{gga_next_generation(), t.crc, t.stored_as};
    for (uint32_t k = 0; k < gga_target_count; ++k) {
      accel::gga_entry mine = e;
      mine.role = accel::gga_role(k);
      accel::encode_gga_entry(mine, std::span<uint8_t, accel::gga_entry_size>(
                                        t.chunk + layout_.entry_at(k), accel::gga_entry_size));
    }
  }
  (void)t.d1->set_data(t.d1->head(), half());
  (void)t.d2->set_data(t.d2->head(), half());
  (void)t.parity->set_data(t.parity->head(), 0);
  accel::ec_create_task* task = ec_->allocate_create(config_.matrix, *t.d1, *t.d2, *t.parity);
  if (task == nullptr) {
    fail(t, "no EC create task", status::no_memory);
    return;
  }
  task->set_user_data(core::make_user_data(index(t)));
  if (status r = ec_->submit(*task); !ok(r)) {
    task->free();
    fail(t, "EC create not submitted", r);
  }
}

// With one target lost, a v2 write goes on to the two others: their slots carry the new
// generation, the lost target's slot an older one, so no read pairs it with them (it is rewritten
// by the first read that finds it, or the rebuild). v1 has no generation to tell them apart: a
// stripe is written whole or not at all there. Two targets lost: no write.
bool gga_worker::io_path::write_allowed(transaction& t) noexcept {
  if (lost_ == 0) return true;
  if (!verified()) {
    fail(t, "write refused: a storage target is lost", status::not_connected);
    return false;
  }
  if (std::popcount(lost_) >= 2) {
    fail(t, "write refused: two storage targets are lost", status::not_connected);
    return false;
  }
  return true;
}

void gga_worker::io_path::write_halves(transaction& t) noexcept {
  if (!write_allowed(t)) return;
  begin_step(t);
  for (uint32_t k = 0; k < gga_target_count; ++k)
    if (!is_lost(k))
      issue(t, k, io_message_type::write, layout_.slots().slot(), layout_.slot_at(k),
            slot_offset(t));
  t.issuing = false;
  settle(t);
}

void gga_worker::io_path::begin_step(transaction& t) noexcept {
  ++t.step;
  t.asked = 0;
  t.answered = 0;
  t.issuing = true;
  t.deadline = engine_.pass_time() + config_.storage_timeout;
}

// A target that does not answer in time is lost (logged once); the transactions that waited for
// it go on without it. Their slots are retired: the silent target may still write into their
// chunks when it wakes. Sends still in flight are waited for: their tasks have their own
// deadline, and the buffers are not reused before they complete.
size_t gga_worker::io_path::sweep_deadlines() noexcept {
  const auto now = engine_.pass_time();
  size_t expired = 0;
  for (transaction& t : txns_) {
    if (t.awaiting == 0 || now < t.deadline) continue;
    ++expired;
    for (uint32_t k = 0; k < gga_target_count; ++k)
      if ((t.awaiting & (1u << k)) != 0 && !is_lost(k) && (suspects_ & (1u << k)) == 0) {
        ZC_LOG_ERROR("worker {}: storage target {} did not answer within {} ms", cpu_, k,
                     config_.storage_timeout.count());
        suspect(k);
      }
    t.retired = true;
  }
  if (expired != 0) take_suspects();
  return expired;
}

size_t gga_worker::io_path::take_suspects() noexcept {
  const uint8_t fresh = suspects_;
  suspects_ = 0;
  if (fresh == 0) return 0;
  lost_ = static_cast<uint8_t>(lost_ | fresh);
  lost_published_.store(lost_, std::memory_order_relaxed);
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    const uint8_t bit = static_cast<uint8_t>(1u << k);
    if ((fresh & bit) == 0) continue;
    ZC_LOG_ERROR("worker {}: storage target {} lost; {}", cpu_, k,
                 std::popcount(lost_) >= 2 ? "two targets lost, no block can be read"
                 : verified()
                     ? "reads are served degraded (EC recovery), writes go to the two others"
                     : "reads are served degraded (EC recovery), writes refused");
    // Fenced: whatever it still had in flight, it touches this worker's memory no more.
    (void)control_[k]->stop();
    (void)data_[k]->stop();
  }
  // Every transaction that waited for a lost target settles without it.
  for (transaction& t : txns_) {
    if ((t.awaiting & fresh) == 0) continue;
    t.awaiting = static_cast<uint8_t>(t.awaiting & ~fresh);
    settle(t);
  }
  return 1;
}

size_t gga_worker::io_path::poll() {
  size_t done = take_suspects();
  done += rebuild_step();
  if (in_flight_ != 0 && engine_.pass_time() >= next_sweep_) {
    done += sweep_deadlines();
    next_sweep_ = engine_.pass_time() + deadline_sweep;
  }
  while (!resends_.empty()) {
    const uint32_t key = resends_.front();
    const uint32_t i = key / gga_target_count, target = key % gga_target_count;
    const status r = control_[target]->submit(*txns_[i].send[target]);
    if (r == status::again) break;
    resends_.pop();
    ++done;
    if (!ok(r)) storage_send_failed(i, target, r);
  }
  while (!backlog_.empty()) {
    const uint32_t i = backlog_.front();
    const status r = producer_->submit(*txns_[i].reply);
    if (r == status::again) break;
    backlog_.pop();
    ++done;
    if (!ok(r)) {
      note_error("reply not delivered to the host", r);
      on_replied(txns_[i], false);
    }
  }
  return done;
}

// ---- gga_worker: the control thread's side

gga_worker::gga_worker(uint32_t cpu, core::poll_mode mode, const core::device& device,
                       comch::connection& conn, uint32_t transactions, gga_worker_config config,
                       gga_worker_limits limits)
    : cpu_(cpu), host_(cpu, mode, limits) {
  if (transactions == 0 || transactions > max_worker_transactions)
    throw status_error(status::invalid_value, fmt::format("transaction count {} is outside 1..{}",
                                                          transactions, max_worker_transactions));
  // By value: a build that outlives this wait must not read this constructor's frame.
  host_.build(
      [cpu, engine = &host_.engine(), device = &device, conn = &conn, transactions, config] {
        return std::make_unique<io_path>(cpu, *engine, *device, *conn, transactions, config);
      });
}

gga_worker::~gga_worker() = default;

std::vector<uint8_t> gga_worker::export_connection(uint32_t target, storage::rdma_role role) {
  return host_.call([target, role](io_path& io) { return io.export_connection(target, role); });
}

void gga_worker::connect(uint32_t target, storage::rdma_role role,
                         std::span<const uint8_t> peer_blob) {
  // The blob is copied: a connect that outlives this wait must not read the caller's message.
  host_.call([target, role, blob = std::vector<uint8_t>(peer_blob.begin(), peer_blob.end())](
                 io_path& io) { io.connect(target, role, blob); });
}

bool gga_worker::ready() {
  return host_.ready();
}

void gga_worker::start_data_path(uint32_t host_consumer_id) {
  host_.start_data_path(host_consumer_id);
}

void gga_worker::close_comch() {
  host_.close_comch();
}

bool gga_worker::rdma_lost() const noexcept {
  return host_.rdma_lost();
}

uint8_t gga_worker::lost_targets() const noexcept {
  const io_path* io = host_.io();
  return io != nullptr ? io->lost_targets() : 0;
}

void gga_worker::begin_rebuild(uint64_t first, uint64_t end, uint64_t bytes_per_second) {
  host_.call([first, end, bytes_per_second](io_path& io) {
    io.begin_rebuild(first, end, bytes_per_second);
  });
}

bool gga_worker::rebuilding() {
  return host_.call([](io_path& io) { return io.rebuild_running(); });
}

void gga_worker::lose_target(uint32_t target) {
  host_.call([target](io_path& io) { io.lose_target(target); });
}

std::array<std::optional<gga_worker::label_bytes>, gga_target_count> gga_worker::label_io(
    bool write, const std::array<label_bytes, gga_target_count>& labels, uint8_t targets,
    core::steady_clock::time_point deadline) {
  if (!host_.wait_for([](io_path& io) { return io.storage_ready(); }, deadline))
    throw status_error(status::time_out,
                       fmt::format("worker on cpu {}: the storage targets' rdma connections are "
                                   "not up",
                                   cpu_));
  if (!host_.call([write, labels, targets](io_path& io) {
        return io.begin_label_io(write, labels, targets);
      }))
    throw status_error(status::bad_state, "volume label IO while the data path runs");
  // The step's own deadline (the storage timeout) settles it first when a target is silent.
  (void)host_.wait_for([](io_path& io) { return io.label_io_done(); }, deadline);
  return host_.call([](io_path& io) {
    if (!io.label_io_done()) return std::array<std::optional<label_bytes>, gga_target_count>{};
    return io.label_io_result();
  });
}

gga_worker_stats gga_worker::stats() {
  return host_.call([](io_path& io) { return io.stats(); });
}

template class worker_host<gga_worker::io_path>;

}  // namespace zc::service
