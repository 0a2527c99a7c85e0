// doca_sync_event.h over zc::core::sync_event: the CPU handle (get, set, add, waits), its export
// to a network peer and the peer's remote handle, which doca_rdma's remote_net_sync_event tasks
// (rdma.cpp) operate on, and the event as a DOCA context whose get, notify_set, notify_add,
// wait_eq and wait_neq tasks complete from doca_pe_progress(). DPA, GPU and PCI locations are not
// supported: each says so once and returns DOCA_ERROR_NOT_SUPPORTED.
#include <doca_sync_event.h>

#include <sched.h>

#include <array>
#include <atomic>
#include <span>

#include "objects.hpp"
#include "task_conf.hpp"

struct doca_sync_event_task_get : doca_task {};
struct doca_sync_event_task_notify_set : doca_task {};
struct doca_sync_event_task_notify_add : doca_task {};
struct doca_sync_event_task_wait_eq : doca_task {};
struct doca_sync_event_task_wait_neq : doca_task {};

namespace zc::doca {

// The zcstore side of a sync event context's task: the DOCA task of the same kind and pool index
// holds what the program gave.
struct sync_event_task final : core::task_base {};

enum class sync_event_op : size_t { get, notify_set, notify_add, wait_eq, wait_neq, count };

class sync_event_context;

}  // namespace zc::doca

// A sync event: its counter is a zc::core::sync_event, or 8 bytes of the program's own
// (doca_sync_event_set_addr) wrapped in a memory map; either way the map is what an export
// names. It is used either stand-alone (doca_sync_event_start) or as a DOCA context
// (doca_sync_event_as_ctx + doca_ctx_start), not both, as DOCA says.
struct doca_sync_event final : doca_ctx {
  ~doca_sync_event() override;
  doca_error_t start() override;
  zc::core::context* zc_context() noexcept override;

  std::unique_ptr<zc::core::sync_event> zc;           // unless set_addr gave the counter
  std::unique_ptr<zc::core::memory_map> program_map;  // set_addr's 8 bytes
  uint64_t* counter = nullptr;                        // in one of the two
  zc::core::memory_map* map = nullptr;                // the one holding counter
  bool started = false;                               // stand-alone
  bool remote_net_publisher = false;                  // export_to_remote_net needs it
  std::vector<uint8_t> remote_net_export;             // the blob handed out, while started
  // Context mode: made by doca_ctx_start (it needs the progress engine).
  std::unique_ptr<zc::doca::sync_event_context> context;
  zc::doca::task_conf<doca_sync_event_task_get> get;
  zc::doca::task_conf<doca_sync_event_task_notify_set> notify_set;
  zc::doca::task_conf<doca_sync_event_task_notify_add> notify_add;
  zc::doca::task_conf<doca_sync_event_task_wait_eq> wait_eq;
  zc::doca::task_conf<doca_sync_event_task_wait_neq> wait_neq;

  bool context_idle() const noexcept;
};

namespace zc::doca {

// The event as a zcstore context: get, set and add complete at once (their callbacks run from
// the next progress call); a wait completes from the progress call that finds it satisfied, so a
// program sleeping in doca_pe_progress() is never blocked by one.
class sync_event_context final : public core::context {
 public:
  sync_event_context(core::progress_engine& engine, doca_sync_event& event)
      : core::context(engine), event_(event) {
    configure(event.get, sync_event_op::get);
    configure(event.notify_set, sync_event_op::notify_set);
    configure(event.notify_add, sync_event_op::notify_add);
    configure(event.wait_eq, sync_event_op::wait_eq);
    configure(event.wait_neq, sync_event_op::wait_neq);
    // Every wait task may be pending at once: submit (the data path) never allocates.
    waiting_.reserve(size_t{event.wait_eq.num_tasks} + event.wait_neq.num_tasks);
  }

  sync_event_task* allocate(sync_event_op op) noexcept {
    auto& pool = pools_[static_cast<size_t>(op)];
    return pool.configured() ? pool.allocate() : nullptr;
  }

  status submit(doca_task& w) noexcept {
    if (state() != core::context_state::running) return status::bad_state;
    auto& t = static_cast<sync_event_task&>(*w.zc);
    std::atomic_ref<uint64_t> counter(*event_.counter);
    switch (w.type) {
      case zc_doca_task_type::sync_event_get:
        if (w.value_ptr == nullptr) return status::invalid_value;
        *w.value_ptr = counter.load();
        break;
      case zc_doca_task_type::sync_event_notify_set:
        counter.store(w.operand0);
        break;
      case zc_doca_task_type::sync_event_notify_add:
        if (w.value_ptr == nullptr) return status::invalid_value;
        *w.value_ptr = counter.fetch_add(w.operand0);
        break;
      case zc_doca_task_type::sync_event_wait_eq:
      case zc_doca_task_type::sync_event_wait_neq:
        task_submitted();
        waiting_.push_back(&w);
        waits_pending_.store(true);
        return status::success;
      default:
        return status::invalid_value;
    }
    task_submitted();
    complete(t, status::success);
    return status::success;
  }

  size_t poll() override {
    size_t done = 0;
    const uint64_t now = std::atomic_ref<uint64_t>(*event_.counter).load();
    std::erase_if(waiting_, [&](doca_task* w) {
      const uint64_t masked = now & w->operand1;
      const bool eq = masked == w->operand0;
      if (eq != (w->type == zc_doca_task_type::sync_event_wait_eq)) return false;
      complete(*w->zc, status::success);
      ++done;
      return true;
    });
    if (done != 0) waits_pending_.store(!waiting_.empty());
    return done;
  }

  // A pending wait task is work: doca_pe_request_notification must not let the program sleep
  // while one is pending, for the counter may change with nothing to wake the engine (a peer's
  // update served by another engine, set_addr memory the program writes itself).
  bool arm() override { return waiting_.empty(); }

  // A CPU update (doca_sync_event_update_set/_add, any thread): a wait task may hold now, so the
  // engine's sleeper is woken, as it is for a program that armed before it submitted the wait.
  void counter_changed() noexcept {
    if (waits_pending_.load()) engine().notify();
  }

 protected:
  core::context_state on_start() override { return core::context_state::running; }
  void on_stop() override {
    // Waits still pending come back with an error, as a stopped DOCA context's tasks do.
    for (doca_task* w : waiting_) complete(*w->zc, status::shutdown);
    waiting_.clear();
    waits_pending_.store(false);
  }

 private:
  template <typename Typed>
  void configure(task_conf<Typed>& conf, sync_event_op op) {
    conf.template apply<sync_event_task>(
        event_, [this, op](uint32_t count, auto on_success, auto on_error) {
          pools_[static_cast<size_t>(op)].configure(*this, count, std::move(on_success),
                                                    std::move(on_error));
        });
  }

  doca_sync_event& event_;
  std::array<core::task_pool<sync_event_task>, static_cast<size_t>(sync_event_op::count)> pools_;
  std::vector<doca_task*> waiting_;  // wait tasks not yet satisfied, in submission order
  // !waiting_.empty(), for counter_changed() on other threads (waiting_ is the engine thread's).
  std::atomic<bool> waits_pending_{false};
};

}  // namespace zc::doca

doca_sync_event::~doca_sync_event() = default;

zc::core::context* doca_sync_event::zc_context() noexcept {
  return context.get();
}

bool doca_sync_event::context_idle() const noexcept {
  return context == nullptr || context->state() == zc::core::context_state::idle;
}

doca_error_t doca_sync_event::start() {
  if (started) return DOCA_ERROR_BAD_STATE;  // started stand-alone: not a context any more
  if (context == nullptr)
    context = std::make_unique<zc::doca::sync_event_context>(pe->engine, *this);
  if (context->state() != zc::core::context_state::idle) return DOCA_ERROR_BAD_STATE;
  context->set_state_changed_callback(
      [this](zc::core::context&, zc::core::context_state previous, zc::core::context_state next) {
        // A stopped context ends its export, as doca_sync_event_stop does stand-alone.
        if (next == zc::core::context_state::idle) {
          map->withdraw_rdma_export();
          remote_net_export.clear();
        }
        record(previous, next);
      });
  return zc::doca::to_doca(context->start());
}

namespace zc::doca {
namespace {

// The rights a remote handle needs: get reads, notify_set writes, notify_add is an atomic.
constexpr core::access remote_event_rights = core::rdma_all;

uint64_t load(const doca_sync_event& e) noexcept {
  return std::atomic_ref<uint64_t>(*e.counter).load();
}

// Polls until pred(counter & mask) holds. DOCA's waits have no bound, and a program relies on
// returning only once the condition holds, so neither has this one. It progresses no engine: a
// wait that ran the program's callbacks could run one that destroys the event it reads, or
// progress an engine another thread drives. A peer's remote update on an exported event lands
// when the owner's engine is progressed (docs/DOCA_COMPAT.md, "What differs from hardware").
template <typename Pred>
doca_error_t wait(doca_sync_event* event, uint64_t mask, bool yield, Pred pred) noexcept {
  if (event == nullptr || event->counter == nullptr) return DOCA_ERROR_INVALID_VALUE;
  while (!pred(load(*event) & mask))
    if (yield) sched_yield();
  return DOCA_SUCCESS;
}

doca_error_t configurable(const doca_sync_event* event) noexcept {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return event->started || !event->context_idle() ? DOCA_ERROR_BAD_STATE : DOCA_SUCCESS;
}

}  // namespace
}  // namespace zc::doca

using zc::doca::guarded;

extern "C" {

// ---- Lifetime

doca_error_t doca_sync_event_create(struct doca_sync_event** event) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    auto e = std::make_unique<doca_sync_event>();
    e->zc = std::make_unique<zc::core::sync_event>(0);
    e->map = &e->zc->map();
    e->counter = reinterpret_cast<uint64_t*>(e->map->data());
    *event = e.release();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_sync_event_create_from_export(struct doca_dev* dev, const uint8_t* data,
                                                size_t sz, struct doca_sync_event** event) {
  (void)dev;
  (void)data;
  (void)sz;
  (void)event;
  return ZC_DOCA_NOT_SUPPORTED();  // PCI exports of sync events: no PCI sharing in this slice
}

doca_error_t doca_sync_event_cap_is_create_from_export_supported(
    const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}

doca_error_t doca_sync_event_remote_net_create_from_export(
    struct doca_dev* dev, const uint8_t* data, size_t sz,
    struct doca_sync_event_remote_net** event) {
  if (dev == nullptr || data == nullptr || sz == 0 || event == nullptr)
    return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    // import_rdma checks the framing (magic, version, length, checksum) and throws on a bad one.
    auto map = zc::core::memory_map::import_rdma(std::span(data, sz));
    // An mmap's export is framed the same way: only an event's 8 bytes with every remote right
    // are an event.
    if (map->size() != sizeof(uint64_t) ||
        !zc::core::has(map->permissions(), zc::doca::remote_event_rights)) {
      ZC_SDK_LOG_ERROR(
          "doca_sync_event_remote_net_create_from_export: the export is not a sync "
          "event's ({} bytes)",
          map->size());
      return DOCA_ERROR_INVALID_VALUE;
    }
    auto e = std::make_unique<doca_sync_event_remote_net>();
    e->map = std::move(map);
    *event = e.release();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_sync_event_cap_remote_net_is_create_from_export_supported(
    const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}

doca_error_t doca_sync_event_destroy(struct doca_sync_event* event) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (!event->context_idle()) return DOCA_ERROR_BAD_STATE;  // a context must be stopped first
  // A wait (or other) task callback that stopped the event's context: the engine reads the
  // context again when the callback returns.
  if (zc::doca::destroyed_inside_progress(*event, __func__)) return DOCA_ERROR_IN_USE;
  return guarded(__func__, [&] {
    if (event->pe != nullptr) std::erase(event->pe->contexts, static_cast<doca_ctx*>(event));
    // The map's destruction ends its export: a peer's later task fails with NOT_FOUND.
    delete event;
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_sync_event_remote_net_destroy(struct doca_sync_event_remote_net* event) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    delete event;
    return DOCA_SUCCESS;
  });
}

// ---- Configuration

doca_error_t doca_sync_event_add_publisher_location_cpu(struct doca_sync_event* event,
                                                        struct doca_dev* dev) {
  if (dev == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::configurable(event);
}

doca_error_t doca_sync_event_add_publisher_location_dpa(struct doca_sync_event* event,
                                                        struct doca_dpa* dpa) {
  (void)event;
  (void)dpa;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_add_publisher_location_gpu(struct doca_sync_event* event,
                                                        struct doca_gpu* gpu) {
  (void)event;
  (void)gpu;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_add_publisher_location_remote_pci(struct doca_sync_event* event) {
  (void)event;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_add_publisher_location_remote_net(struct doca_sync_event* event) {
  auto r = zc::doca::configurable(event);
  if (r == DOCA_SUCCESS) event->remote_net_publisher = true;
  return r;
}

doca_error_t doca_sync_event_add_subscriber_location_cpu(struct doca_sync_event* event,
                                                         struct doca_dev* dev) {
  if (dev == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::configurable(event);
}

doca_error_t doca_sync_event_add_subscriber_location_dpa(struct doca_sync_event* event,
                                                         struct doca_dpa* dpa) {
  (void)event;
  (void)dpa;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_add_subscriber_location_gpu(struct doca_sync_event* event,
                                                         struct doca_gpu* gpu) {
  (void)event;
  (void)gpu;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_add_subscriber_location_remote_pci(struct doca_sync_event* event) {
  (void)event;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_set_addr(struct doca_sync_event* event, uint64_t* addr) {
  if (addr == nullptr || reinterpret_cast<uintptr_t>(addr) % alignof(uint64_t) != 0)
    return DOCA_ERROR_INVALID_VALUE;
  if (auto r = zc::doca::configurable(event); r != DOCA_SUCCESS) return r;
  return guarded(__func__, [&] {
    event->program_map = zc::core::memory_map::wrap(
        addr, sizeof(uint64_t), zc::core::access::local_read_write | zc::core::rdma_all);
    event->map = event->program_map.get();
    event->counter = addr;
    event->zc.reset();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_sync_event_set_doca_buf(struct doca_sync_event* event, struct doca_buf* buf) {
  (void)event;
  (void)buf;
  return ZC_DOCA_NOT_SUPPORTED();  // dma-buf backed counters: no dma-buf here
}

doca_error_t doca_sync_event_start(struct doca_sync_event* event) {
  if (auto r = zc::doca::configurable(event); r != DOCA_SUCCESS) return r;
  event->started = true;
  return DOCA_SUCCESS;
}

doca_error_t doca_sync_event_stop(struct doca_sync_event* event) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (!event->started) return DOCA_ERROR_BAD_STATE;
  return guarded(__func__, [&] {
    // A stopped event is no longer reachable: a peer's later task fails; a new start and export
    // hands out a new blob.
    event->map->withdraw_rdma_export();
    event->remote_net_export.clear();
    event->started = false;
    return DOCA_SUCCESS;
  });
}

// ---- Export

doca_error_t doca_sync_event_export_to_remote_pci(struct doca_sync_event* event,
                                                  struct doca_dev* dev, const uint8_t** data,
                                                  size_t* sz) {
  (void)event;
  (void)dev;
  (void)data;
  (void)sz;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_cap_is_export_to_remote_pci_supported(
    const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}

doca_error_t doca_sync_event_get_dpa_handle(struct doca_sync_event* event, struct doca_dpa* dpa,
                                            doca_dpa_dev_sync_event_t* dpa_dev_se_handle) {
  (void)event;
  (void)dpa;
  (void)dpa_dev_se_handle;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_cap_is_export_to_dpa_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}

doca_error_t doca_sync_event_get_gpu_handle(struct doca_sync_event* event, struct doca_gpu* gpu,
                                            doca_gpu_dev_sync_event_t** gpu_dev_se) {
  (void)event;
  (void)gpu;
  (void)gpu_dev_se;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_cap_is_export_to_gpu_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}

doca_error_t doca_sync_event_export_to_remote_net(struct doca_sync_event* event,
                                                  const uint8_t** data, size_t* sz) {
  if (event == nullptr || data == nullptr || sz == nullptr) return DOCA_ERROR_INVALID_VALUE;
  const bool running_context =
      event->context != nullptr && event->context->state() == zc::core::context_state::running;
  if (!event->started && !running_context) return DOCA_ERROR_BAD_STATE;
  // DOCA requires the publisher declared remote_net before the export: a program that forgets
  // it fails here as it would on a NIC.
  if (!event->remote_net_publisher) {
    ZC_SDK_LOG_ERROR("{}: the publisher is not declared remote_net", __func__);
    return DOCA_ERROR_NOT_PERMITTED;
  }
  return guarded(__func__, [&] {
    if (event->remote_net_export.empty()) event->remote_net_export = event->map->export_rdma();
    *data = event->remote_net_export.data();
    *sz = event->remote_net_export.size();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_sync_event_cap_is_export_to_remote_net_supported(
    const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}

doca_error_t doca_sync_event_remote_net_get_dpa_handle(
    struct doca_sync_event_remote_net* event, struct doca_dpa* dpa,
    doca_dpa_dev_sync_event_remote_net_t* dpa_remote_event) {
  (void)event;
  (void)dpa;
  (void)dpa_remote_event;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_cap_remote_net_is_export_to_dpa_supported(
    const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}

doca_error_t doca_sync_event_remote_net_get_gpu_handle(
    struct doca_sync_event_remote_net* event, struct doca_gpu* gpu,
    doca_gpu_dev_sync_event_remote_net_t* gpu_remote_event) {
  (void)event;
  (void)gpu;
  (void)gpu_remote_event;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_cap_remote_net_is_export_to_gpu_supported(
    const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}

// ---- CPU operations

doca_error_t doca_sync_event_get(struct doca_sync_event* event, uint64_t* value) {
  if (event == nullptr || value == nullptr || event->counter == nullptr)
    return DOCA_ERROR_INVALID_VALUE;
  *value = zc::doca::load(*event);
  return DOCA_SUCCESS;
}

doca_error_t doca_sync_event_update_add(struct doca_sync_event* event, uint64_t value,
                                        uint64_t* fetched) {
  if (event == nullptr || fetched == nullptr || event->counter == nullptr)
    return DOCA_ERROR_INVALID_VALUE;
  *fetched = std::atomic_ref<uint64_t>(*event->counter).fetch_add(value);
  if (event->context != nullptr) event->context->counter_changed();
  return DOCA_SUCCESS;
}

doca_error_t doca_sync_event_update_set(struct doca_sync_event* event, uint64_t value) {
  if (event == nullptr || event->counter == nullptr) return DOCA_ERROR_INVALID_VALUE;
  std::atomic_ref<uint64_t>(*event->counter).store(value);
  if (event->context != nullptr) event->context->counter_changed();
  return DOCA_SUCCESS;
}

doca_error_t doca_sync_event_wait_gt(struct doca_sync_event* event, uint64_t value, uint64_t mask) {
  return zc::doca::wait(event, mask, false, [value](uint64_t v) { return v > value; });
}

doca_error_t doca_sync_event_wait_gt_yield(struct doca_sync_event* event, uint64_t value,
                                           uint64_t mask) {
  return zc::doca::wait(event, mask, true, [value](uint64_t v) { return v > value; });
}

doca_error_t doca_sync_event_wait_eq(struct doca_sync_event* event, uint64_t value, uint64_t mask) {
  return zc::doca::wait(event, mask, false, [value](uint64_t v) { return v == value; });
}

doca_error_t doca_sync_event_wait_eq_yield(struct doca_sync_event* event, uint64_t value,
                                           uint64_t mask) {
  return zc::doca::wait(event, mask, true, [value](uint64_t v) { return v == value; });
}

doca_error_t doca_sync_event_wait_neq(struct doca_sync_event* event, uint64_t value,
                                      uint64_t mask) {
  return zc::doca::wait(event, mask, false, [value](uint64_t v) { return v != value; });
}

doca_error_t doca_sync_event_wait_neq_yield(struct doca_sync_event* event, uint64_t value,
                                            uint64_t mask) {
  return zc::doca::wait(event, mask, true, [value](uint64_t v) { return v != value; });
}

// ---- The event as a context

struct doca_ctx* doca_sync_event_as_ctx(struct doca_sync_event* event) {
  // A stand-alone started event cannot become a context (DOCA's rule).
  if (event == nullptr || event->started) return nullptr;
  return event;
}

doca_error_t doca_sync_event_cap_task_get_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}
doca_error_t doca_sync_event_cap_task_notify_set_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}
doca_error_t doca_sync_event_cap_task_notify_add_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}
doca_error_t doca_sync_event_cap_task_wait_eq_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}
doca_error_t doca_sync_event_cap_task_wait_neq_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_SUCCESS;
}

}  // extern "C"

namespace zc::doca {
namespace {

// Stores a task kind's configuration; the context made at the next doca_ctx_start uses it.
template <typename Typed>
doca_error_t set_conf(doca_sync_event* event, task_conf<Typed>& conf,
                      typename task_conf<Typed>::callback on_success,
                      typename task_conf<Typed>::callback on_error, uint32_t num_tasks) {
  if (!task_conf<Typed>::acceptable(on_success, on_error, num_tasks))
    return DOCA_ERROR_INVALID_VALUE;
  if (event->started || !event->context_idle()) return DOCA_ERROR_BAD_STATE;
  conf.store(on_success, on_error, num_tasks);
  event->context.reset();  // idle: made again, with every kind's pool, at the next start
  return DOCA_SUCCESS;
}

doca_error_t submit(doca_task& w) noexcept {
  return to_doca(static_cast<doca_sync_event&>(*w.ctx).context->submit(w));
}

template <typename Typed>
doca_error_t allocate(doca_sync_event* event, task_conf<Typed>& conf, sync_event_op op,
                      zc_doca_task_type type, union doca_data user_data, Typed** out) {
  if (event == nullptr || out == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (event->context == nullptr || event->context->state() != core::context_state::running)
    return DOCA_ERROR_BAD_STATE;
  sync_event_task* t = event->context->allocate(op);
  if (t == nullptr) return DOCA_ERROR_NO_MEMORY;
  *out = &conf.allocated(*event, *t, type, user_data, &submit);
  return DOCA_SUCCESS;
}

}  // namespace
}  // namespace zc::doca

extern "C" {

doca_error_t doca_sync_event_task_get_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_get_completion_cb_t completion_cb,
    doca_sync_event_task_get_completion_cb_t error_cb, uint32_t num_tasks) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf(event, event->get, completion_cb, error_cb, num_tasks);
}

doca_error_t doca_sync_event_task_get_alloc_init(struct doca_sync_event* event,
                                                 uint64_t* ret_val_ptr, union doca_data user_data,
                                                 struct doca_sync_event_task_get** task) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate(event, event->get, zc::doca::sync_event_op::get,
                              zc_doca_task_type::sync_event_get, user_data, task);
  if (r == DOCA_SUCCESS) (*task)->value_ptr = ret_val_ptr;
  return r;
}

struct doca_task* doca_sync_event_task_get_as_doca_task(struct doca_sync_event_task_get* task) {
  return task;
}

void doca_sync_event_task_get_set_ret_val_ptr(struct doca_sync_event_task_get* task,
                                              uint64_t* ret_val_ptr) {
  if (task != nullptr) task->value_ptr = ret_val_ptr;
}

uint64_t* doca_sync_event_task_get_get_ret_val_ptr(const struct doca_sync_event_task_get* task) {
  return task == nullptr ? nullptr : task->value_ptr;
}

doca_error_t doca_sync_event_task_notify_set_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_notify_set_completion_cb_t completion_cb,
    doca_sync_event_task_notify_set_completion_cb_t error_cb, uint32_t num_tasks) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf(event, event->notify_set, completion_cb, error_cb, num_tasks);
}

doca_error_t doca_sync_event_task_notify_set_alloc_init(
    struct doca_sync_event* event, uint64_t set_val, union doca_data user_data,
    struct doca_sync_event_task_notify_set** task) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate(event, event->notify_set, zc::doca::sync_event_op::notify_set,
                              zc_doca_task_type::sync_event_notify_set, user_data, task);
  if (r == DOCA_SUCCESS) (*task)->operand0 = set_val;
  return r;
}

struct doca_task* doca_sync_event_task_notify_set_as_doca_task(
    struct doca_sync_event_task_notify_set* task) {
  return task;
}

void doca_sync_event_task_notify_set_set_set_val(struct doca_sync_event_task_notify_set* task,
                                                 uint64_t set_val) {
  if (task != nullptr) task->operand0 = set_val;
}

uint64_t doca_sync_event_task_notify_set_get_set_val(
    const struct doca_sync_event_task_notify_set* task) {
  return task == nullptr ? 0 : task->operand0;
}

doca_error_t doca_sync_event_task_notify_add_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_notify_add_completion_cb_t completion_cb,
    doca_sync_event_task_notify_add_completion_cb_t error_cb, uint32_t num_tasks) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf(event, event->notify_add, completion_cb, error_cb, num_tasks);
}

doca_error_t doca_sync_event_task_notify_add_alloc_init(
    struct doca_sync_event* event, uint64_t inc_val, uint64_t* fetched_val_ptr,
    union doca_data user_data, struct doca_sync_event_task_notify_add** task) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate(event, event->notify_add, zc::doca::sync_event_op::notify_add,
                              zc_doca_task_type::sync_event_notify_add, user_data, task);
  if (r == DOCA_SUCCESS) {
    (*task)->operand0 = inc_val;
    (*task)->value_ptr = fetched_val_ptr;
  }
  return r;
}

struct doca_task* doca_sync_event_task_notify_add_as_doca_task(
    struct doca_sync_event_task_notify_add* task) {
  return task;
}

void doca_sync_event_task_notify_add_set_inc_val(struct doca_sync_event_task_notify_add* task,
                                                 uint64_t inc_val) {
  if (task != nullptr) task->operand0 = inc_val;
}

uint64_t doca_sync_event_task_notify_add_get_inc_val(
    const struct doca_sync_event_task_notify_add* task) {
  return task == nullptr ? 0 : task->operand0;
}

void doca_sync_event_task_notify_add_set_fetched_val_ptr(
    struct doca_sync_event_task_notify_add* task, uint64_t* fetched_val_ptr) {
  if (task != nullptr) task->value_ptr = fetched_val_ptr;
}

uint64_t* doca_sync_event_task_notify_add_get_fetched_val_ptr(
    const struct doca_sync_event_task_notify_add* task) {
  return task == nullptr ? nullptr : task->value_ptr;
}

doca_error_t doca_sync_event_task_wait_eq_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_wait_eq_completion_cb_t completion_cb,
    doca_sync_event_task_wait_eq_completion_cb_t error_cb, uint32_t num_tasks) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf(event, event->wait_eq, completion_cb, error_cb, num_tasks);
}

doca_error_t doca_sync_event_task_wait_eq_alloc_init(struct doca_sync_event* event,
                                                     uint64_t wait_val, uint64_t mask,
                                                     union doca_data user_data,
                                                     struct doca_sync_event_task_wait_eq** task) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate(event, event->wait_eq, zc::doca::sync_event_op::wait_eq,
                              zc_doca_task_type::sync_event_wait_eq, user_data, task);
  if (r == DOCA_SUCCESS) {
    (*task)->operand0 = wait_val;
    (*task)->operand1 = mask;
  }
  return r;
}

struct doca_task* doca_sync_event_task_wait_eq_as_doca_task(
    struct doca_sync_event_task_wait_eq* task) {
  return task;
}

void doca_sync_event_task_wait_eq_set_wait_val(struct doca_sync_event_task_wait_eq* task,
                                               uint64_t wait_val) {
  if (task != nullptr) task->operand0 = wait_val;
}

uint64_t doca_sync_event_task_wait_eq_get_wait_val(
    const struct doca_sync_event_task_wait_eq* task) {
  return task == nullptr ? 0 : task->operand0;
}

void doca_sync_event_task_wait_eq_set_mask(struct doca_sync_event_task_wait_eq* task,
                                           uint64_t mask) {
  if (task != nullptr) task->operand1 = mask;
}

uint64_t doca_sync_event_task_wait_eq_get_mask(const struct doca_sync_event_task_wait_eq* task) {
  return task == nullptr ? 0 : task->operand1;
}

doca_error_t doca_sync_event_task_wait_neq_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_wait_neq_completion_cb_t completion_cb,
    doca_sync_event_task_wait_neq_completion_cb_t error_cb, uint32_t num_tasks) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return zc::doca::set_conf(event, event->wait_neq, completion_cb, error_cb, num_tasks);
}

doca_error_t doca_sync_event_task_wait_neq_alloc_init(struct doca_sync_event* event,
                                                      uint64_t wait_val, uint64_t mask,
                                                      union doca_data user_data,
                                                      struct doca_sync_event_task_wait_neq** task) {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::allocate(event, event->wait_neq, zc::doca::sync_event_op::wait_neq,
                              zc_doca_task_type::sync_event_wait_neq, user_data, task);
  if (r == DOCA_SUCCESS) {
    (*task)->operand0 = wait_val;
    (*task)->operand1 = mask;
  }
  return r;
}

struct doca_task* doca_sync_event_task_wait_neq_as_doca_task(
    struct doca_sync_event_task_wait_neq* task) {
  return task;
}

void doca_sync_event_task_wait_neq_set_wait_val(struct doca_sync_event_task_wait_neq* task,
                                                uint64_t wait_val) {
  if (task != nullptr) task->operand0 = wait_val;
}

uint64_t doca_sync_event_task_wait_neq_get_wait_val(
    const struct doca_sync_event_task_wait_neq* task) {
  return task == nullptr ? 0 : task->operand0;
}

void doca_sync_event_task_wait_neq_set_mask(struct doca_sync_event_task_wait_neq* task,
                                            uint64_t mask) {
  if (task != nullptr) task->operand1 = mask;
}

uint64_t doca_sync_event_task_wait_neq_get_mask(const struct doca_sync_event_task_wait_neq* task) {
  return task == nullptr ? 0 : task->operand1;
}

}  // extern "C"
