// The engine-thread half of a gga_worker (gga_worker.hpp): its contexts, engines and buffers,
// and the per-transaction state machine of every host IO. Private to the gga worker: its member
// functions are split along the flows of a transaction, one file each:
//   gga_worker.cpp       construction and teardown, connect, start, label IO, poll(), the deadline
//                        sweep and the marking of lost targets (degraded mode), error accounting,
//                        and the control thread's side (gga_worker)
//   gga_transaction.cpp  the host's request in and its reply out, block after block, each step's
//                        requests to the targets and their responses, settle()
//   gga_read.cpp         a block read: the pair of slots to decode, EC recovery, decompression or
//                        copy into the host's pages, the v2 checksum check and a bad slot's repair
//   gga_write.cpp        a block write: DMA from the host, compression, EC create, the slot writes
//   gga_rebuild.cpp      the paced background rebuild of a replacement target's slots
//   gga_marks.cpp        with a target lost, the live targets' labels made to name it before a
//                        write it misses is sent or acknowledged (the writes park meanwhile)
//   gga_sparse.cpp       discard and write zeroes (the slots zeroed on the three targets) and the
//                        allocation map (the targets' maps, folded into one bit per block)
// Thread rules: the worker's engine thread, except where a method says otherwise.
#pragma once

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "accel/dma_engine.hpp"
#include "accel/ec_engine.hpp"
#include "accel/gga_format.hpp"
#include "accel/lz4_engine.hpp"
#include "comch/consumer.hpp"
#include "comch/producer.hpp"
#include "core/buffer.hpp"
#include "core/progress_engine.hpp"
#include "rdma/context.hpp"
#include "service/gga_layout.hpp"
#include "service/gga_worker.hpp"
#include "service/retry_queue.hpp"
#include "storage/io_message.hpp"

namespace zc::service {

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
  // The rebuild checked every block of its share and rewrote every bad slot it found.
  bool rebuild_complete() const noexcept { return rebuild_completed_ && !rebuild_failed_; }
  // Format v2, before the data path starts: the volume's label (its role ignored) and the
  // targets its labels already name as having missed writes (being rebuilt). A target lost from
  // now on is added to the labels of the two others before a write that it misses is sent or
  // acknowledged (gga_marks.cpp).
  void set_volume(const accel::gga_label& volume, uint8_t missed) noexcept {
    volume_ = volume;
    missed_ = missed;
  }
  // The targets the session's rebuild made whole again: a target lost from now on is named on
  // the labels without them.
  void forget_missed(uint8_t rebuilt) noexcept {
    missed_ = static_cast<uint8_t>(missed_ & ~rebuilt);
  }
  // The targets' rdma connections are up (what label IO needs).
  bool storage_ready() const noexcept;
  // In the last transaction (the rebuild's), before the data path starts or while it runs and
  // that transaction is idle; false when it is not.
  bool begin_label_io(bool write, const std::array<label_bytes, gga_target_count>& labels,
                      uint8_t targets) noexcept;
  bool label_io_done() const noexcept { return !label_pending_; }
  // Discard and write zeroes are answered INVALID_VALUE from now on (the front end writes zeros
  // as data): a background rebuild may rewrite a slot between a zeroing's steps.
  void refuse_zeroing() noexcept { zeroing_refused_ = true; }
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
    return {.cpu = cpu_,
            .operations = operations_,
            .recoveries = forced_,
            .errors = errors_,
            .pe_hits = engine_.hits(),
            .pe_misses = engine_.misses(),
            .verified = verified_,
            .repaired = repaired_,
            .unrecoverable = unrecoverable_,
            .raw_writes = raw_writes_,
            .degraded_writes = degraded_writes_,
            .rebuilds = rebuilds_};
  }

  size_t poll() override;
  core::steady_clock::time_point next_deadline() const override {
    if (suspects_ != 0) return core::steady_clock::now();
    if (!backlog_.empty() || !resends_.empty() || !stripe_waits_.empty() ||
        (!parked_.empty() && !mark_pending_))
      return core::steady_clock::now() + backlog_retry;
    const auto sweep = in_flight_ != 0 ? next_sweep_ : core::steady_clock::time_point::max();
    if (rebuilding_ && serving_ && txns_[host_transactions_].op == operation::none)
      return std::min(sweep, rebuild_due_);
    return sweep;
  }

 private:
  // How soon a reply or a storage request that found no room is tried again.
  static constexpr auto backlog_retry = std::chrono::milliseconds(1);
  enum class operation : uint8_t { none, read, write, flush, label, zero, map };
  // Where a write waits for the lost target to be named on the others' labels (gga_marks.cpp).
  enum class parked_at : uint8_t { none, before_write, before_reply };
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
    uint8_t got = 0;  // slots whose target answered for this block (their entry is in the chunk)
    uint8_t refused = 0;
    uint8_t tried = 0;
    uint8_t pair = 0;
    uint8_t repair = 0;
    accel::gga_pair_verdict verdict = accel::gga_pair_verdict::lz4;
    accel::gga_entry entry;
    // A block write: how it is stored and the crc32c of its plain bytes.
    accel::gga_stored_as stored_as = accel::gga_stored_as::lz4;
    uint32_t crc = 0;
    // A discard or write zeroes (gga_sparse.cpp): the bytes [span_at, span_end) of the blocks'
    // slots on every target, zeroed in up to three steps (the whole target blocks inside, then
    // the head and the tail); span_step: the steps sent so far.
    uint64_t span_at = 0;
    uint64_t span_end = 0;
    uint8_t span_step = 0;
    // An allocation map: host blocks [map_next, map_end) still to fold into the host's bitmap at
    // host offset map_at (bit j - map_first for block j); the targets' maps of this step start at
    // target block map_window and are map_bytes long, each in its target's slot of the chunk.
    uint64_t map_first = 0;
    uint64_t map_next = 0;
    uint64_t map_end = 0;
    uint64_t map_at = 0;
    uint64_t map_window = 0;
    uint32_t map_bytes = 0;
    parked_at parked = parked_at::none;
    // The block's stripe lock (gga_stripes.hpp): what its read saw, and what it holds.
    gga_stripe_locks::snapshot stripe_seen = 0;
    enum class holds : uint8_t { nothing, write, repair, zeroing } stripe = holds::nothing;
    bool retired = false;  // not used again: a target may still touch its chunk
    bool issuing = false;  // a step's requests are being sent: not settled before all are out
    uint32_t step = 0;     // stamps this step's requests: an older step's answer is not taken
    core::steady_clock::time_point deadline{};  // for this step's responses
    status result = status::success;
  };
  struct response_slot {
    core::buffer* message = nullptr;
    rdma::receive_task* receive = nullptr;
    bool posted = false;  // submitted and not completed: not posted again (arm_storage)
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
  void issue(transaction& t, uint32_t target, storage::io_message_type type, uint32_t io_size,
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
  bool newer_write_may_land(const transaction& t, uint32_t target) const noexcept;
  void block_done(transaction& t) noexcept;
  size_t rebuild_step() noexcept;
  void rebuild_block_done(transaction& t, status result) noexcept;
  bool is_rebuild(const transaction& t) const noexcept { return index(t) == host_transactions_; }
  bool refused_in_v1(transaction& t, const char* what) noexcept;
  void begin_zeroing(transaction& t, uint32_t io_size, uint64_t storage_offset) noexcept;
  void zero_step(transaction& t) noexcept;
  void zero_settled(transaction& t) noexcept;
  void begin_map(transaction& t, uint32_t io_size, uint64_t requester_offset,
                 uint64_t storage_offset) noexcept;
  void map_step(transaction& t) noexcept;
  void map_settled(transaction& t) noexcept;
  void dma_from_host(transaction& t) noexcept;
  void compress(transaction& t) noexcept;
  void encode(transaction& t) noexcept;
  void write_halves(transaction& t) noexcept;
  bool write_allowed(transaction& t) noexcept;
  // Missed-write marks (gga_marks.cpp): a write that a lost target misses waits (parks) until
  // the labels of the two others name it; true when t was parked.
  bool needs_mark() const noexcept {
    return volume_.volume != 0 && std::popcount(lost_) == 1 && (lost_ & ~missed_) != 0;
  }
  bool park_for_mark(transaction& t, parked_at where) noexcept;
  bool begin_mark() noexcept;
  void mark_settled(transaction& t) noexcept;
  size_t serve_parked() noexcept;
  transaction& label_transaction() noexcept { return txns_[host_transactions_]; }
  uint8_t* host_block(const transaction& t) const noexcept {
    if (is_rebuild(t)) return scratch_->data();
    return config_.host->data() + t.plan.host_offset + uint64_t(t.block) * block_size();
  }
  uint64_t slot_offset(const transaction& t) const noexcept {
    return t.plan.target_offset + uint64_t(t.block) * layout_.slots().slot();
  }
  // The block t is at, as the stripe locks know it.
  uint64_t stripe_of(const transaction& t) const noexcept {
    return slot_offset(t) / layout_.slots().slot();
  }
  void observe_stripe(transaction& t) noexcept {
    if (config_.stripes != nullptr) t.stripe_seen = config_.stripes->observe(stripe_of(t));
  }
  // Takes t's block (a write) or a zeroing's blocks (each counts as a write of its block) for t;
  // false while a repair of one of them is in flight: t waits in stripe_waits_ (poll() tries
  // again) or, should that be full, fails.
  bool hold_stripe(transaction& t, transaction::holds kind) noexcept;
  // Gives back what t holds, if anything.
  void release_stripe(transaction& t) noexcept;
  // A zeroing's blocks, as the stripe locks know them: [first, first + count).
  std::pair<uint64_t, uint64_t> zeroed_blocks(const transaction& t) const noexcept {
    const uint64_t s = layout_.slots().slot();
    return {t.span_at / s, (t.span_end - t.span_at) / s};
  }
  void fail(transaction& t, const char* what, status why) noexcept;
  // Hands `task`, allocated from `engine` for t, to the engine (its callbacks go on with t), or
  // fails t: `no_task` when none was free, `not_submitted` when the engine refused it.
  template <typename Engine, typename Task>
  void submit_task(transaction& t, Engine& engine, Task* task, const char* no_task,
                   const char* not_submitted) noexcept {
    if (task == nullptr) {
      fail(t, no_task, status::no_memory);
      return;
    }
    task->set_user_data(core::make_user_data(index(t)));
    if (status r = engine.submit(*task); !ok(r)) {
      task->free();
      fail(t, not_submitted, r);
    }
  }
  void post_response_receive(uint32_t target, response_slot& s) noexcept;
  // Posts every response receive not posted yet (label IO comes before start_serving, and after
  // the drain).
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
  log_first error_log_{log::level::error};
  bool storage_armed_ = false;  // response receives posted
  // The rebuild (begin_rebuild): blocks [next, end) left, one per interval.
  bool rebuilding_ = false;
  uint64_t rebuild_next_ = 0;
  uint64_t rebuild_end_ = 0;
  uint64_t rebuild_total_ = 0;
  uint64_t rebuild_checked_ = 0;
  uint64_t rebuild_repaired_at_start_ = 0;
  bool rebuild_completed_ = false;  // the rebuild reached the end of its share
  bool rebuild_failed_ = false;     // a block of it was not rebuilt, or it stopped
  bool rebuild_again_ = false;      // the block being checked is checked once more
  uint32_t rebuild_retries_ = 0;    // times the block being checked was checked again
  std::chrono::nanoseconds rebuild_interval_{0};
  core::steady_clock::time_point rebuild_due_{};
  std::unique_ptr<core::memory_map> scratch_;  // the rebuild's block
  bool zeroing_refused_ = false;               // refuse_zeroing() was called
  bool label_pending_ = false;                 // a label IO in the label transaction
  uint8_t label_answered_ = 0;                 // its targets that answered with success
  // Missed-write marks (gga_marks.cpp): the volume's label (volume 0: no labels, format v1),
  // the targets the live targets' labels name, a mark being written (and what it names), and
  // the writes that wait for it (transaction indices, oldest first).
  accel::gga_label volume_{};
  uint8_t missed_ = 0;
  bool mark_pending_ = false;
  uint8_t mark_missed_ = 0;
  bool mark_refused_logged_ = false;
  retry_queue parked_;
  log_first fault_log_{log::level::warning};
  std::unique_ptr<core::memory_map> messages_;
  core::buffer_inventory inventory_;
  std::vector<transaction> txns_;
  std::array<std::vector<response_slot>, gga_target_count> responses_;
  // Block writes waiting for a repair of their block to end (transaction indices), oldest first.
  retry_queue stripe_waits_;
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

}  // namespace zc::service
