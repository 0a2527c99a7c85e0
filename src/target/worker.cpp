#include "target/worker.hpp"

#include <fmt/format.h>

#include "core/buffer.hpp"
#include "core/log.hpp"
#include "rdma/context.hpp"
#include "storage/io_message.hpp"
#include "target/flusher.hpp"

namespace zc::target {

namespace {
// How long a destroyed io_path lets its contexts stop before they are destroyed anyway.
constexpr auto teardown_limit = std::chrono::milliseconds(2000);

// For the log lines of the IO types a fault may stop.
const char* io_name(storage::io_message_type type) noexcept {
  switch (type) {
    case storage::io_message_type::read:
      return "read";
    case storage::io_message_type::write:
      return "write";
    case storage::io_message_type::discard:
      return "discard";
    case storage::io_message_type::write_zeroes:
      return "write zeroes";
    case storage::io_message_type::allocation_map:
      return "allocation map";
    default:
      return "IO";
  }
}
}  // namespace

using storage::io_message_size;
using storage::io_message_type;
using storage::io_message_view;
using storage::max_allocation_map_size;

// The engine-thread half of a worker. Every member and method belongs to the worker's thread.
class target_worker::io_path {
 public:
  io_path(uint32_t cpu, core::engine_thread& thread, const core::device& device,
          target_storage& storage, core::memory_map& remote, uint32_t transactions);
  ~io_path();

  std::vector<uint8_t> connect(storage::rdma_role role, std::span<const uint8_t> peer_blob);
  bool ready() const noexcept {
    return control_->state() == core::context_state::running &&
           data_->state() == core::context_state::running;
  }
  void start_serving();
  void stop_serving() noexcept { serving_ = false; }
  uint32_t in_flight() const noexcept { return in_flight_; }
  void stop_contexts();
  bool stopped() const noexcept {
    return control_->state() == core::context_state::idle &&
           data_->state() == core::context_state::idle;
  }
  worker_stats stats() const noexcept {
    worker_stats st = counts_;
    st.cpu = cpu_;
    st.operations = counts_.reads + counts_.writes;
    st.errors = errors_;
    st.pe_hits = engine_.hits();
    st.pe_misses = engine_.misses();
    st.refused_messages = refused_messages_;
    return st;
  }

 private:
  struct slot {
    core::buffer* message = nullptr;  // the request, then the response (same 64 bytes)
    rdma::receive_task* receive = nullptr;
    rdma::send_task* send = nullptr;
    rdma::read_task* read = nullptr;
    rdma::write_task* write = nullptr;
    // The two sides of the slot's transfers, held for the whole session: each IO re-points them
    // (core::buffer::reset) instead of taking descriptors from the inventory and returning them.
    core::buffer* local = nullptr;   // storage side (a window of storage_)
    core::buffer* peer = nullptr;    // requester side (a window of remote_)
    core::buffer* bitmap = nullptr;  // an allocation map's source (the slot's part of bitmaps_)
  };

  slot& slot_of(const core::task_base& t) { return slots_[t.get_user_data().u64]; }
  void on_request(slot& s);
  bool acceptable(io_message_type type, uint64_t size, uint64_t storage_offset,
                  uint64_t requester_offset) const noexcept;
  void on_flush(slot& s, uint64_t size);
  void storage_done(const std::vector<uint32_t>& slots, status result);
  uint32_t index_of(const slot& s) const noexcept {
    return static_cast<uint32_t>(&s - slots_.data());
  }
  std::span<uint8_t> bitmap_of(const slot& s) const noexcept {
    return {bitmaps_map_->data() + size_t(index_of(s)) * max_allocation_map_size,
            max_allocation_map_size};
  }
  status submit_allocation_map(slot& s, uint64_t requester_offset, uint32_t size);
  zc::log::level refusal_level() const noexcept;
  void on_receive_failed(slot& s, status result);
  status submit_transfer(slot& s, io_message_type type, uint64_t storage_offset,
                         uint64_t requester_offset, uint32_t size);
  void on_transfer_done(slot& s, status result);
  void respond(slot& s, status result);
  void answered(slot& s);
  void post_receive(slot& s);
  void watch(rdma::context& ctx, const char* role);

  const uint32_t cpu_;
  core::progress_engine& engine_;
  target_storage& store_;
  core::memory_map& storage_;  // the target_storage's blocks
  core::memory_map& remote_;
  bool serving_ = false;
  uint32_t in_flight_ = 0;  // requests received and not yet answered
  worker_stats counts_;     // the IOs of each type and their bytes
  uint64_t errors_ = 0;
  uint64_t refused_messages_ = 0;
  std::unique_ptr<core::memory_map> messages_map_;  // the slots' 64-byte messages
  // One allocation map per slot, max_allocation_map_size bytes each: the source of its rdma
  // write (the storage's memory is no place to build one). Its pages are taken only when a map is
  // built in them (memfd memory), so many slots that never send a map cost address space only.
  std::unique_ptr<core::memory_map> bitmaps_map_;
  // Four buffers per slot, taken once: its message, its storage side, its requester side and
  // its bitmap.
  core::buffer_inventory inventory_;
  std::vector<slot> slots_;
  // Its results come back as jobs on this thread, which do nothing once this io_path is being
  // destroyed (alive_ false): the destructor joins the flusher first.
  std::unique_ptr<target_flusher> flusher_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Declared last, so destroyed first: nothing they hold may outlive the buffers and slots.
  std::unique_ptr<rdma::context> control_;
  std::unique_ptr<rdma::context> data_;
};

target_worker::io_path::io_path(uint32_t cpu, core::engine_thread& thread,
                                const core::device& device, target_storage& storage,
                                core::memory_map& remote, uint32_t transactions)
    : cpu_(cpu),
      engine_(thread.engine()),
      store_(storage),
      storage_(storage.map()),
      remote_(remote),
      messages_map_(core::memory_map::allocate(size_t(transactions) * io_message_size,
                                               core::access::local_read_write)),
      bitmaps_map_(core::memory_map::allocate(size_t(transactions) * max_allocation_map_size,
                                              core::access::local_read_write)),
      inventory_(transactions * 4),
      slots_(transactions),
      control_(std::make_unique<rdma::context>(engine_, device)),
      data_(std::make_unique<rdma::context>(engine_, device)) {
  // Nothing of this process is exported: the peer may not touch our memory through either.
  control_->set_permissions(core::access::local_read_only);
  data_->set_permissions(core::access::local_read_only);
  watch(*control_, "io_control");
  watch(*data_, "io_data");
  control_->configure<rdma::receive_task>(
      transactions, [this](rdma::receive_task& t) { on_request(slot_of(t)); },
      [this](rdma::receive_task& t) { on_receive_failed(slot_of(t), t.result()); });
  control_->configure<rdma::send_task>(
      transactions, [this](rdma::send_task& t) { answered(slot_of(t)); },
      [this](rdma::send_task& t) {
        ZC_LOG_ERROR("worker {}: response not delivered: {}", cpu_, status_name(t.result()));
        ++errors_;
        answered(slot_of(t));
      });
  auto transferred = [this](auto& t) { on_transfer_done(slot_of(t), t.result()); };
  data_->configure<rdma::read_task>(transactions, transferred, transferred);
  data_->configure<rdma::write_task>(transactions, transferred, transferred);
  for (uint32_t i = 0; i < transactions; ++i) {
    slot& s = slots_[i];
    throw_if_failed(
        inventory_.get_by_addr(*messages_map_, messages_map_->data() + i * io_message_size,
                               io_message_size, s.message),
        "message buffer");
    // Whole-map windows for now; each transfer narrows them to its own range.
    throw_if_failed(inventory_.get_by_addr(storage_, storage_.data(), storage_.size(), s.local),
                    "storage buffer");
    throw_if_failed(inventory_.get_by_addr(remote_, remote_.data(), remote_.size(), s.peer),
                    "requester buffer");
    throw_if_failed(inventory_.get_by_addr(*bitmaps_map_, bitmap_of(s).data(),
                                           max_allocation_map_size, s.bitmap),
                    "bitmap buffer");
    auto ud = core::make_user_data(i);
    throw_if_failed(control_->allocate(ud, s.receive), "receive task");
    throw_if_failed(control_->allocate(ud, s.send), "send task");
    throw_if_failed(data_->allocate(ud, s.read), "read task");
    throw_if_failed(data_->allocate(ud, s.write), "write task");
    s.receive->set_dst(*s.message);
    s.send->set_src(*s.message);
    s.write->set(*s.local, *s.peer);  // an IO read: storage -> requester
    s.read->set(*s.peer, *s.local);   // an IO write: requester -> storage
  }
  throw_if_failed(control_->start(), "start io_control context");
  throw_if_failed(data_->start(), "start io_data context");
  flusher_ = std::make_unique<target_flusher>(
      storage,
      [this, thread = &thread, alive = alive_](std::vector<uint32_t> slots, status result) {
        thread->post([this, alive, slots = std::move(slots), result] {
          if (*alive) storage_done(slots, result);
        });
      });
}

target_worker::io_path::~io_path() {
  // What the contexts flush on their way out is not an error of the session.
  serving_ = false;
  // The flusher's last results, posted while it finishes, find alive_ false and do nothing.
  *alive_ = false;
  flusher_.reset();
  // A response UCX still sends from a slot's message, or a request it still receives into one,
  // must not land in freed memory: the contexts stop first (bounded), and if they do not, the
  // messages stay mapped for good rather than be freed under UCX.
  stop_contexts();
  engine_.run_until([this] { return stopped(); }, teardown_limit);
  if (!stopped()) {
    ZC_LOG_ERROR("worker {}: connections did not stop in time; their message memory is kept", cpu_);
    (void)messages_map_.release();
  }
}

// A connection that leaves running while IOs are served fails every IO that needs it from then
// on; say once why, rather than only counting the failures. When io_control goes, io_data is
// stopped too: the service that sent the IOs can no longer hear their answers, so it has failed
// them (or will), and no transfer of this session may touch its memory afterwards.
void target_worker::io_path::watch(rdma::context& ctx, const char* role) {
  ctx.set_state_changed_callback(
      [this, &ctx, role](core::context&, core::context_state previous, core::context_state next) {
        if (!serving_ || previous != core::context_state::running ||
            next == core::context_state::running)
          return;
        ZC_LOG_ERROR("worker {}: {} connection lost ({})", cpu_, role, status_name(ctx.failure()));
        if (&ctx == control_.get()) {
          serving_ = false;
          (void)data_->stop();
        }
      });
}

std::vector<uint8_t> target_worker::io_path::connect(storage::rdma_role role,
                                                     std::span<const uint8_t> peer_blob) {
  rdma::context& ctx = role == storage::rdma_role::io_control ? *control_ : *data_;
  if (ctx.state() != core::context_state::starting)
    throw status_error(status::already_exist,
                       fmt::format("worker on cpu {} already has its {} connection", cpu_,
                                   storage::to_string(role)));
  auto mine = ctx.export_connection();
  ctx.connect(peer_blob);
  return mine;
}

void target_worker::io_path::start_serving() {
  serving_ = true;
  for (auto& s : slots_) post_receive(s);
}

void target_worker::io_path::stop_contexts() {
  (void)control_->stop();
  (void)data_->stop();
}

void target_worker::io_path::answered(slot& s) {
  --in_flight_;
  post_receive(s);
}

void target_worker::io_path::post_receive(slot& s) {
  s.message->set_data(s.message->head(), 0);
  if (!serving_) return;
  if (status r = control_->submit(*s.receive); !ok(r)) {
    ZC_LOG_ERROR("worker {}: cannot post receive: {}", cpu_, status_name(r));
    ++errors_;
  }
}

void target_worker::io_path::on_receive_failed(slot& s, status result) {
  if (!serving_) return;  // a stop flushes the posted receives
  // Every posted receive fails when the connection goes: one line says it, not one per slot.
  const zc::log::level level = refusal_level();
  ++errors_;
  if (control_->state() != core::context_state::running) {
    ::zc::log::print(::zc::log::source::app, level, "worker {}: receive failed: {}", cpu_,
                     status_name(result));
    return;
  }
  // The connection is still up, so only this message was bad (too_big: it did not fit the 64-byte
  // slot). Without a new receive the slot would be lost for the rest of the session.
  ++refused_messages_;
  ZC_LOG_ERROR("worker {}: message refused ({}); receive posted again", cpu_, status_name(result));
  post_receive(s);
}

// The first refused IO is a warning; later ones are counted (errors, in the stats) and logged at
// debug level, so a misbehaving peer cannot flood the log from the data path.
zc::log::level target_worker::io_path::refusal_level() const noexcept {
  return errors_ == 0 ? zc::log::level::warning : zc::log::level::debug;
}

// A request arrived in slot s: check it against both regions, then move the data.
void target_worker::io_path::on_request(slot& s) {
  ++in_flight_;
  if (s.receive->received_length() != io_message_size) {
    ::zc::log::print(::zc::log::source::app, refusal_level(),
                     "worker {}: {}-byte IO message refused", cpu_, s.receive->received_length());
    ++errors_;
    respond(s, status::invalid_value);
    return;
  }
  io_message_view msg(s.message->head());
  const uint64_t size = msg.io_size();
  const uint64_t storage_offset = msg.storage_offset();
  const uint64_t requester_offset = msg.requester_offset();
  const auto type = msg.type();
  if (type == io_message_type::flush) {
    on_flush(s, size);
    return;
  }
  if (!acceptable(type, size, storage_offset, requester_offset)) {
    ::zc::log::print(::zc::log::source::app, refusal_level(),
                     "worker {}: IO refused: type {} size {} storage offset {} requester offset {}",
                     cpu_, static_cast<uint32_t>(type), size, storage_offset, requester_offset);
    ++errors_;
    respond(s, status::invalid_value);
    return;
  }
  // Discard and write zeroes change the storage as a write does: the write faults apply.
  const bool writes = type == io_message_type::write || type == io_message_type::discard ||
                      type == io_message_type::write_zeroes;
  const char* kind = writes ? "write" : "read";
  if (!store_.answer_io()) {
    // Fault injection (--drop-ios-after): the IO is never answered and its slot never posted
    // again; nothing is in flight for it, so the session still ends in its own time.
    --in_flight_;
    ::zc::log::print(::zc::log::source::app, refusal_level(),
                     "worker {}: {} left unanswered (fault injection: --drop-ios-after)", cpu_,
                     io_name(type));
    return;
  }
  if (type != io_message_type::allocation_map &&
      (writes ? !store_.admit_write() : !store_.admit_read())) {
    ::zc::log::print(::zc::log::source::app, refusal_level(),
                     "worker {}: {} refused (fault injection: --fail-{}s-after)", cpu_,
                     io_name(type), kind);
    ++errors_;
    respond(s, status::io_failed);
    return;
  }
  switch (type) {
    case io_message_type::discard:
    case io_message_type::write_zeroes:
      // A memset or hole punch of a large range takes long (a GiB of memory is ~100 ms): the
      // flusher thread does it, and the slot stays in flight until storage_done().
      flusher_->request_deallocate(index_of(s), storage_offset, size);
      return;
    case io_message_type::allocation_map:
      // Searching a file of many extents takes many lseeks: the flusher thread builds the bitmap
      // in the slot's own area, and storage_done() sends it.
      flusher_->request_allocation_map(index_of(s), storage_offset / store_.block_size(),
                                       bitmap_of(s).first(size));
      return;
    default:
      break;
  }
  // A write into a hole of a backing file allocates it first (a SIGBUS otherwise when the file
  // system is full). Inline: a fallocate of one IO's blocks is one short syscall, and only a
  // write into a block that was discarded, or a hole of the file at start, pays it, once.
  if (type == io_message_type::write) {
    if (const status r = store_.prepare_write(storage_offset, size); !ok(r)) {
      ++errors_;
      respond(s, r);
      return;
    }
  }
  const status r =
      submit_transfer(s, type, storage_offset, requester_offset, static_cast<uint32_t>(size));
  if (!ok(r)) {
    // REFERENCE_SPEC §7.3: a transfer that cannot be submitted is answered with the submit's own
    // status (bad_state when the io_data connection is gone, ...), not the IO_FAILED of a
    // transfer that failed on its way.
    ZC_LOG_ERROR("worker {}: cannot submit the transfer: {}", cpu_, status_name(r));
    ++errors_;
    respond(s, r);
  }
}

// The rules of DESIGN §2 and FORMATS §3 for each type but flush: a read or write lies inside the
// storage and the requester's region; a discard or write zeroes is whole blocks inside the storage
// (requester_offset is not looked at); an allocation map starts at a block inside the storage, is
// at most max_allocation_map_size bytes, and lies inside the requester's region.
bool target_worker::io_path::acceptable(io_message_type type, uint64_t size,
                                        uint64_t storage_offset,
                                        uint64_t requester_offset) const noexcept {
  const uint64_t block = store_.block_size();
  const bool in_storage =
      size != 0 && storage_offset <= storage_.size() && size <= storage_.size() - storage_offset;
  const bool in_requester =
      size != 0 && requester_offset <= remote_.size() && size <= remote_.size() - requester_offset;
  switch (type) {
    case io_message_type::read:
    case io_message_type::write:
      return in_storage && in_requester;
    case io_message_type::discard:
    case io_message_type::write_zeroes:
      return in_storage && storage_offset % block == 0 && size % block == 0;
    case io_message_type::allocation_map:
      return in_requester && size <= max_allocation_map_size && storage_offset % block == 0 &&
             storage_offset < storage_.size();
    default:
      return false;
  }
}

// DESIGN §2: io_size 0, answered once every write completed so far is durable. Every write this
// target answered has completed into the shared mapping, whichever worker served it, so one sync
// of the whole mapping covers them all. The sync runs on this worker's flusher thread, so the
// worker goes on serving reads and writes meanwhile; the slot stays in flight until flushed().
void target_worker::io_path::on_flush(slot& s, uint64_t size) {
  if (size != 0) {
    ::zc::log::print(::zc::log::source::app, refusal_level(),
                     "worker {}: flush refused: io_size {} (must be 0)", cpu_, size);
    ++errors_;
    respond(s, status::invalid_value);
    return;
  }
  if (!store_.durable()) {  // memory: volatile by design, nothing to sync
    respond(s, status::success);
    return;
  }
  flusher_->request(index_of(s));
}

// The flusher's answer for these slots: a flush, discard or write zeroes is done; an allocation
// map is built and goes to the requester now.
void target_worker::io_path::storage_done(const std::vector<uint32_t>& slots, status result) {
  for (uint32_t i : slots) {
    slot& s = slots_[i];
    io_message_view msg(s.message->head());
    const io_message_type type = msg.type();
    if (!ok(result)) {
      ++errors_;
      respond(s, result);
      continue;
    }
    if (type == io_message_type::allocation_map) {
      if (const status r = submit_allocation_map(s, msg.requester_offset(), msg.io_size());
          !ok(r)) {
        ZC_LOG_ERROR("worker {}: cannot submit the allocation map: {}", cpu_, status_name(r));
        ++errors_;
        respond(s, r);
      }
      continue;
    }
    if (type == io_message_type::discard) ++counts_.discards;
    if (type == io_message_type::write_zeroes) ++counts_.write_zeroes;
    respond(s, result);
  }
}

// The slot's bitmap (built by the flusher) -> the requester: an rdma write, like a read's.
status target_worker::io_path::submit_allocation_map(slot& s, uint64_t requester_offset,
                                                     uint32_t size) {
  status r = s.bitmap->reset(bitmap_of(s).data(), size);
  if (ok(r)) r = s.peer->reset(remote_.data() + requester_offset, size);
  if (!ok(r)) return r;
  s.bitmap->append(size);
  s.write->set(*s.bitmap, *s.peer);
  return data_->submit(*s.write);
}

// Both transfers land after the destination's data section (DOCA's rdma read and write
// semantics), so each destination is an empty data section at the target address, and each
// source's data section is the bytes to move. The slot's two buffers are re-pointed in place
// (the tasks were given them once, at construction): nothing is taken from or returned to the
// inventory per IO. on_request checked both ranges; reset() checks them once more against the
// maps, which costs two compares.
status target_worker::io_path::submit_transfer(slot& s, io_message_type type,
                                               uint64_t storage_offset, uint64_t requester_offset,
                                               uint32_t size) {
  status r = s.local->reset(storage_.data() + storage_offset, size);
  if (ok(r)) r = s.peer->reset(remote_.data() + requester_offset, size);
  if (!ok(r)) return r;
  if (type == io_message_type::read) {  // storage -> requester: rdma write
    s.local->append(size);
    s.write->set(*s.local, *s.peer);  // an allocation map may have pointed it at the bitmap
    return data_->submit(*s.write);
  }
  s.peer->append(size);  // requester -> storage: rdma read
  return data_->submit(*s.read);
}

void target_worker::io_path::on_transfer_done(slot& s, status result) {
  if (ok(result)) {
    io_message_view msg(s.message->head());
    switch (msg.type()) {
      case io_message_type::read:
        ++counts_.reads;
        counts_.read_bytes += msg.io_size();
        break;
      case io_message_type::write:
        ++counts_.writes;
        counts_.written_bytes += msg.io_size();
        break;
      default:
        ++counts_.allocation_maps;
        break;
    }
  } else {
    ZC_LOG_ERROR("worker {}: transfer failed: {}", cpu_, status_name(result));
    ++errors_;
    result = status::io_failed;
  }
  respond(s, result);
}

// The response reuses the request's buffer: every field stays, type and result change.
void target_worker::io_path::respond(slot& s, status result) {
  io_message_view msg(s.message->head());
  msg.set_type(io_message_type::result);
  msg.set_result(result);
  s.message->set_data(s.message->head(), io_message_size);
  status r = control_->submit(*s.send);
  if (!ok(r)) {
    ZC_LOG_ERROR("worker {}: cannot send response: {}", cpu_, status_name(r));
    ++errors_;
    answered(s);
  }
}

// ---- target_worker: the control thread's side

target_worker::target_worker(uint32_t cpu, core::poll_mode mode, const core::device& device,
                             target_storage& storage, core::memory_map& remote,
                             uint32_t transactions, worker_limits limits)
    : cpu_(cpu), limits_(limits), thread_(mode, cpu) {
  // By value: a build that outlives this wait must not read this constructor's frame.
  io_ = core::engine_owned<io_path>::build(
      thread_,
      [cpu, thread = &thread_, device = &device, storage = &storage, remote = &remote,
       transactions] {
        return std::make_unique<io_path>(cpu, *thread, *device, *storage, *remote, transactions);
      },
      limits.command);
}

target_worker::~target_worker() = default;

std::vector<uint8_t> target_worker::connect(storage::rdma_role role,
                                            std::span<const uint8_t> peer_blob) {
  // The blob is copied: a connect that outlives this wait must not read the caller's message.
  auto mine = thread_.call(
      [io = io_.get(), role, blob = std::vector<uint8_t>(peer_blob.begin(), peer_blob.end())] {
        return io->connect(role, blob);
      },
      limits_.command);
  ++connected_roles_;
  return mine;
}

bool target_worker::ready() {
  return thread_.call([io = io_.get()] { return io->ready(); }, limits_.command);
}

void target_worker::start_data_path() {
  thread_.call([io = io_.get()] { io->start_serving(); }, limits_.command);
}

void target_worker::stop() {
  io_path* io = io_.get();
  thread_.call([io] { io->stop_serving(); }, limits_.command);
  if (!thread_.wait_until([io] { return io->in_flight() == 0; }, limits_.drain))
    ZC_LOG_ERROR("worker {}: IOs still in flight after {} ms", cpu_, limits_.drain.count());
  thread_.call([io] { io->stop_contexts(); }, limits_.command);
  if (!thread_.wait_until([io] { return io->stopped(); }, limits_.drain))
    ZC_LOG_ERROR("worker {}: connections not stopped after {} ms", cpu_, limits_.drain.count());
}

worker_stats target_worker::stats() {
  return thread_.call([io = io_.get()] { return io->stats(); }, limits_.command);
}

}  // namespace zc::target
