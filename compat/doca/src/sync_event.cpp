// doca_sync_event.h over zc::core::sync_event: the CPU handle (get, set, add, waits), its export
// to a network peer and the peer's remote handle, which doca_rdma's remote_net_sync_event tasks
// (rdma.cpp) operate on. The event as a DOCA context, and DPA, GPU and PCI locations, are not
// supported: each says so once and returns DOCA_ERROR_NOT_SUPPORTED.
#include <doca_sync_event.h>

#include <sched.h>

#include <atomic>
#include <span>

#include "objects.hpp"

namespace zc::doca {
namespace {

// The rights a remote handle needs: get reads, notify_set writes, notify_add is an atomic.
constexpr core::access remote_event_rights = core::rdma_all;

uint64_t load(const doca_sync_event& e) noexcept {
  return std::atomic_ref<uint64_t>(*e.counter).load();
}

// Polls until pred(counter & mask) holds. DOCA's waits have no bound, and a program relies on
// returning only once the condition holds, so neither has this one.
template <typename Pred>
doca_error_t wait(doca_sync_event* event, uint64_t mask, bool yield, Pred pred) noexcept {
  if (event == nullptr || event->counter == nullptr) return DOCA_ERROR_INVALID_VALUE;
  while (!pred(load(*event) & mask)) {
    if (yield) sched_yield();
  }
  return DOCA_SUCCESS;
}

doca_error_t configurable(const doca_sync_event* event) noexcept {
  if (event == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return event->started ? DOCA_ERROR_BAD_STATE : DOCA_SUCCESS;
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
  return guarded(__func__, [&] {
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
  auto r = zc::doca::configurable(event);
  if (r == DOCA_SUCCESS) event->publisher_declared = true;
  return r;
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
  if (r == DOCA_SUCCESS) {
    event->publisher_declared = true;
    event->remote_net_publisher = true;
  }
  return r;
}

doca_error_t doca_sync_event_add_subscriber_location_cpu(struct doca_sync_event* event,
                                                         struct doca_dev* dev) {
  if (dev == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto r = zc::doca::configurable(event);
  if (r == DOCA_SUCCESS) event->subscriber_declared = true;
  return r;
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
  if (!event->started) return DOCA_ERROR_BAD_STATE;
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
  return DOCA_SUCCESS;
}

doca_error_t doca_sync_event_update_set(struct doca_sync_event* event, uint64_t value) {
  if (event == nullptr || event->counter == nullptr) return DOCA_ERROR_INVALID_VALUE;
  std::atomic_ref<uint64_t>(*event->counter).store(value);
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

// ---- The event as a context (not supported: zcstore's sync event is no context)

struct doca_ctx* doca_sync_event_as_ctx(struct doca_sync_event* event) {
  (void)event;
  ZC_DOCA_NOT_SUPPORTED();
  return nullptr;
}

doca_error_t doca_sync_event_cap_task_get_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}
doca_error_t doca_sync_event_cap_task_notify_set_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}
doca_error_t doca_sync_event_cap_task_notify_add_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}
doca_error_t doca_sync_event_cap_task_wait_eq_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}
doca_error_t doca_sync_event_cap_task_wait_neq_is_supported(const struct doca_devinfo* devinfo) {
  return devinfo == nullptr ? DOCA_ERROR_INVALID_VALUE : DOCA_ERROR_NOT_SUPPORTED;
}

doca_error_t doca_sync_event_task_get_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_get_completion_cb_t completion_cb,
    doca_sync_event_task_get_completion_cb_t error_cb, uint32_t num_tasks) {
  (void)event;
  (void)completion_cb;
  (void)error_cb;
  (void)num_tasks;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_task_get_alloc_init(struct doca_sync_event* event,
                                                 uint64_t* ret_val_ptr, union doca_data user_data,
                                                 struct doca_sync_event_task_get** task) {
  (void)event;
  (void)ret_val_ptr;
  (void)user_data;
  (void)task;
  return ZC_DOCA_NOT_SUPPORTED();
}

struct doca_task* doca_sync_event_task_get_as_doca_task(struct doca_sync_event_task_get* task) {
  (void)task;
  return nullptr;
}

void doca_sync_event_task_get_set_ret_val_ptr(struct doca_sync_event_task_get* task,
                                              uint64_t* ret_val_ptr) {
  (void)task;
  (void)ret_val_ptr;
}

uint64_t* doca_sync_event_task_get_get_ret_val_ptr(const struct doca_sync_event_task_get* task) {
  (void)task;
  return nullptr;
}

doca_error_t doca_sync_event_task_notify_set_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_notify_set_completion_cb_t completion_cb,
    doca_sync_event_task_notify_set_completion_cb_t error_cb, uint32_t num_tasks) {
  (void)event;
  (void)completion_cb;
  (void)error_cb;
  (void)num_tasks;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_task_notify_set_alloc_init(
    struct doca_sync_event* event, uint64_t set_val, union doca_data user_data,
    struct doca_sync_event_task_notify_set** task) {
  (void)event;
  (void)set_val;
  (void)user_data;
  (void)task;
  return ZC_DOCA_NOT_SUPPORTED();
}

struct doca_task* doca_sync_event_task_notify_set_as_doca_task(
    struct doca_sync_event_task_notify_set* task) {
  (void)task;
  return nullptr;
}

void doca_sync_event_task_notify_set_set_set_val(struct doca_sync_event_task_notify_set* task,
                                                 uint64_t set_val) {
  (void)task;
  (void)set_val;
}

uint64_t doca_sync_event_task_notify_set_get_set_val(
    const struct doca_sync_event_task_notify_set* task) {
  (void)task;
  return 0;
}

doca_error_t doca_sync_event_task_notify_add_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_notify_add_completion_cb_t completion_cb,
    doca_sync_event_task_notify_add_completion_cb_t error_cb, uint32_t num_tasks) {
  (void)event;
  (void)completion_cb;
  (void)error_cb;
  (void)num_tasks;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_task_notify_add_alloc_init(
    struct doca_sync_event* event, uint64_t inc_val, uint64_t* fetched_val_ptr,
    union doca_data user_data, struct doca_sync_event_task_notify_add** task) {
  (void)event;
  (void)inc_val;
  (void)fetched_val_ptr;
  (void)user_data;
  (void)task;
  return ZC_DOCA_NOT_SUPPORTED();
}

struct doca_task* doca_sync_event_task_notify_add_as_doca_task(
    struct doca_sync_event_task_notify_add* task) {
  (void)task;
  return nullptr;
}

void doca_sync_event_task_notify_add_set_inc_val(struct doca_sync_event_task_notify_add* task,
                                                 uint64_t inc_val) {
  (void)task;
  (void)inc_val;
}

uint64_t doca_sync_event_task_notify_add_get_inc_val(
    const struct doca_sync_event_task_notify_add* task) {
  (void)task;
  return 0;
}

void doca_sync_event_task_notify_add_set_fetched_val_ptr(
    struct doca_sync_event_task_notify_add* task, uint64_t* fetched_val_ptr) {
  (void)task;
  (void)fetched_val_ptr;
}

uint64_t* doca_sync_event_task_notify_add_get_fetched_val_ptr(
    const struct doca_sync_event_task_notify_add* task) {
  (void)task;
  return nullptr;
}

doca_error_t doca_sync_event_task_wait_eq_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_wait_eq_completion_cb_t completion_cb,
    doca_sync_event_task_wait_eq_completion_cb_t error_cb, uint32_t num_tasks) {
  (void)event;
  (void)completion_cb;
  (void)error_cb;
  (void)num_tasks;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_task_wait_eq_alloc_init(struct doca_sync_event* event,
                                                     uint64_t wait_val, uint64_t mask,
                                                     union doca_data user_data,
                                                     struct doca_sync_event_task_wait_eq** task) {
  (void)event;
  (void)wait_val;
  (void)mask;
  (void)user_data;
  (void)task;
  return ZC_DOCA_NOT_SUPPORTED();
}

struct doca_task* doca_sync_event_task_wait_eq_as_doca_task(
    struct doca_sync_event_task_wait_eq* task) {
  (void)task;
  return nullptr;
}

void doca_sync_event_task_wait_eq_set_wait_val(struct doca_sync_event_task_wait_eq* task,
                                               uint64_t wait_val) {
  (void)task;
  (void)wait_val;
}

uint64_t doca_sync_event_task_wait_eq_get_wait_val(
    const struct doca_sync_event_task_wait_eq* task) {
  (void)task;
  return 0;
}

void doca_sync_event_task_wait_eq_set_mask(struct doca_sync_event_task_wait_eq* task,
                                           uint64_t mask) {
  (void)task;
  (void)mask;
}

uint64_t doca_sync_event_task_wait_eq_get_mask(const struct doca_sync_event_task_wait_eq* task) {
  (void)task;
  return 0;
}

doca_error_t doca_sync_event_task_wait_neq_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_wait_neq_completion_cb_t completion_cb,
    doca_sync_event_task_wait_neq_completion_cb_t error_cb, uint32_t num_tasks) {
  (void)event;
  (void)completion_cb;
  (void)error_cb;
  (void)num_tasks;
  return ZC_DOCA_NOT_SUPPORTED();
}

doca_error_t doca_sync_event_task_wait_neq_alloc_init(struct doca_sync_event* event,
                                                      uint64_t wait_val, uint64_t mask,
                                                      union doca_data user_data,
                                                      struct doca_sync_event_task_wait_neq** task) {
  (void)event;
  (void)wait_val;
  (void)mask;
  (void)user_data;
  (void)task;
  return ZC_DOCA_NOT_SUPPORTED();
}

struct doca_task* doca_sync_event_task_wait_neq_as_doca_task(
    struct doca_sync_event_task_wait_neq* task) {
  (void)task;
  return nullptr;
}

void doca_sync_event_task_wait_neq_set_wait_val(struct doca_sync_event_task_wait_neq* task,
                                                uint64_t wait_val) {
  (void)task;
  (void)wait_val;
}

uint64_t doca_sync_event_task_wait_neq_get_wait_val(
    const struct doca_sync_event_task_wait_neq* task) {
  (void)task;
  return 0;
}

void doca_sync_event_task_wait_neq_set_mask(struct doca_sync_event_task_wait_neq* task,
                                            uint64_t mask) {
  (void)task;
  (void)mask;
}

uint64_t doca_sync_event_task_wait_neq_get_mask(const struct doca_sync_event_task_wait_neq* task) {
  (void)task;
  return 0;
}

}  // extern "C"
