// gga_worker (gga_worker.hpp) and the frame of its engine-thread half, gga_worker::io_path
// (internal/gga_io_path.hpp): building and tearing it down, connecting and starting it, the volume
// label IO, its poll(), the deadline sweep and the marking of lost targets (degraded mode), and
// the control thread's side. The flows of a transaction are in gga_transaction.cpp,
// gga_read.cpp, gga_write.cpp and gga_rebuild.cpp.
#include "service/gga_worker.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <memory>

#include "core/crc32c.hpp"
#include "core/log.hpp"
#include "service/internal/gga_io_path.hpp"
#include "storage/io_message.hpp"

namespace zc::service {

using storage::io_message_size;
using storage::io_message_type;

namespace {
constexpr auto teardown_limit = std::chrono::milliseconds(2000);
// How often transactions waiting for a target are checked against their deadline.
constexpr auto deadline_sweep = std::chrono::milliseconds(100);
// Chunk views per transaction: d1, d2, parity, plain block, image, host pages.
constexpr uint32_t chunk_views = 6;
// Message buffers per transaction: the host's request, one request per target, one response
// receive per target.
constexpr uint32_t messages_per_transaction = 1 + 2 * gga_target_count;
}  // namespace

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
      parked_(transactions),
      messages_(core::memory_map::allocate(
          size_t(transactions + 1) * messages_per_transaction * io_message_size,
          core::access::local_read_write | core::access::pci_read_write)),
      inventory_((transactions + 1) * (messages_per_transaction + chunk_views) + 1),
      txns_(transactions + 1),
      stripe_waits_(transactions),
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
        [this, k](rdma::receive_task& t) {
          // Receives fail only when the connection does (or at stop): not posted again.
          responses_[k][index_of(t)].posted = false;
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
                                            if (t.op == operation::read) {
                                              // A repair's parity: the read stands.
                                              t.answered = 0;
                                              finish_repair(t);
                                              return;
                                            }
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
                        fail(t,
                             t.op == operation::read ? "DMA of a raw block to the host failed"
                                                     : "DMA from the host failed",
                             why);
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

// ---- label IO, before the data path starts

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

// In the label transaction's chunk, each target's label in the place of its slot; settled by
// settle().
bool gga_worker::io_path::begin_label_io(bool write,
                                         const std::array<label_bytes, gga_target_count>& labels,
                                         uint8_t targets) noexcept {
  transaction& t = label_transaction();
  if (label_pending_ || mark_pending_ || t.retired || t.op != operation::none) return false;
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
  const uint8_t* chunk = txns_[host_transactions_].chunk;
  for (uint32_t k = 0; k < gga_target_count; ++k) {
    if ((label_answered_ & (1u << k)) == 0) continue;
    label_bytes b{};
    std::memcpy(b.data(), chunk + layout_.slot_at(k), b.size());
    out[k] = b;
  }
  return out;
}

// ---- errors, deadlines and lost targets

void gga_worker::io_path::note_error(const char* what, status s) noexcept {
  ++errors_;
  error_log_(cpu_, what, s, "later errors are only counted");
}

void gga_worker::io_path::note_fault(const char* what, status s) noexcept {
  fault_log_(cpu_, what, s,
             "the stripe's other slots serve the block; later ones are only counted");
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
  done += serve_parked();
  // Writes and zeroings that waited for a repair of their blocks: tried again in order.
  for (size_t n = stripe_waits_.size(); n > 0; --n) {
    transaction& t = txns_[stripe_waits_.front()];
    stripe_waits_.pop();
    ++done;
    if (t.op != operation::zero)
      write_halves(t);
    else if (hold_stripe(t, transaction::holds::zeroing))
      zero_step(t);
  }
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

void gga_worker::forget_missed(uint8_t rebuilt) {
  host_.call([rebuilt](io_path& io) { io.forget_missed(rebuilt); });
}

void gga_worker::set_volume(const accel::gga_label& volume, uint8_t missed) {
  host_.call([volume, missed](io_path& io) { io.set_volume(volume, missed); });
}

bool gga_worker::rebuild_complete() {
  return host_.call([](io_path& io) { return io.rebuild_complete(); });
}

void gga_worker::refuse_zeroing() {
  host_.call([](io_path& io) { io.refuse_zeroing(); });
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
    throw status_error(status::bad_state,
                       "volume label IO refused: the label transaction is busy, or retired after "
                       "a storage timeout");
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
