/*
 * DOCA Sync Event: a 64-bit counter that one side updates (the publisher) and another reads or
 * waits on (the subscriber). Flow: create, declare where the publisher and the subscriber are,
 * start; then get, set, add and wait from the CPU. For a peer across the network, declare the
 * publisher remote_net, export the event, hand the blob to the peer, which makes a remote handle
 * from it (doca_sync_event_remote_net_create_from_export) and gets, sets or adds through the
 * RDMA remote_net_sync_event tasks of doca_rdma.h. Instead of doca_sync_event_start, an event
 * may be run as a DOCA context (doca_sync_event_as_ctx, doca_ctx_start) whose tasks complete
 * from doca_pe_progress(): a program waits on the event without blocking its progress loop.
 *
 * Over zcstore the counter is a zc::core::sync_event (8 bytes exported for RDMA with read, write
 * and atomic rights). DPA, GPU and PCI locations and dma-buf counters return
 * DOCA_ERROR_NOT_SUPPORTED (docs/DOCA_COMPAT.md). The API follows DOCA 2.9.
 */
#ifndef ZC_DOCA_SYNC_EVENT_H_
#define ZC_DOCA_SYNC_EVENT_H_

#include <stddef.h>
#include <stdint.h>

#include <doca_compat.h>
#include <doca_error.h>
#include <doca_types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct doca_buf;
struct doca_ctx;
struct doca_dev;
struct doca_devinfo;
struct doca_dpa;
struct doca_gpu;
struct doca_task;

struct doca_sync_event;
struct doca_sync_event_remote_net;

/* Handles of an event for DPA and GPU kernels (not available here). */
typedef uint64_t doca_dpa_dev_sync_event_t;
typedef uint64_t doca_dpa_dev_sync_event_remote_net_t;
typedef uint64_t doca_gpu_dev_sync_event_t;
typedef uint64_t doca_gpu_dev_sync_event_remote_net_t;

/* ---- Lifetime */

/* A new event (value 0) operated from this CPU. */
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_create(struct doca_sync_event** event);
/* An event from a PCI export (doca_sync_event_export_to_remote_pci): not supported. */
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_create_from_export(struct doca_dev* dev,
                                                                  const uint8_t* data, size_t sz,
                                                                  struct doca_sync_event** event);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_is_create_from_export_supported(const struct doca_devinfo* devinfo);
/* A handle on a peer's event, from the blob its doca_sync_event_export_to_remote_net() gave. The
 * blob is checked (framing, size, rights) before use. */
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_remote_net_create_from_export(struct doca_dev* dev, const uint8_t* data, size_t sz,
                                              struct doca_sync_event_remote_net** event);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_remote_net_is_create_from_export_supported(const struct doca_devinfo* devinfo);
/* Destroying an exported event ends its export: a peer's later task fails. */
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_destroy(struct doca_sync_event* event);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_remote_net_destroy(struct doca_sync_event_remote_net* event);

/* ---- Configuration (before doca_sync_event_start; BAD_STATE after) */

DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_add_publisher_location_cpu(struct doca_sync_event* event, struct doca_dev* dev);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_add_publisher_location_dpa(struct doca_sync_event* event, struct doca_dpa* dpa);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_add_publisher_location_gpu(struct doca_sync_event* event, struct doca_gpu* gpu);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_add_publisher_location_remote_pci(struct doca_sync_event* event);
/* Required before doca_sync_event_export_to_remote_net. */
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_add_publisher_location_remote_net(struct doca_sync_event* event);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_add_subscriber_location_cpu(struct doca_sync_event* event, struct doca_dev* dev);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_add_subscriber_location_dpa(struct doca_sync_event* event, struct doca_dpa* dpa);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_add_subscriber_location_gpu(struct doca_sync_event* event, struct doca_gpu* gpu);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_add_subscriber_location_remote_pci(struct doca_sync_event* event);
/* The counter in the program's own 8 bytes (aligned) instead of the event's. They must outlive
 * the event and every peer transfer in flight on it, not only the event: a peer's remote get is
 * served zero-copy from these bytes, and may still be reading them after the event is destroyed
 * (which ends the export, so no new one starts). Free them once the event is destroyed and the
 * doca_rdma contexts that serve peers are stopped. */
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_set_addr(struct doca_sync_event* event,
                                                        uint64_t* addr);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_set_doca_buf(struct doca_sync_event* event,
                                                            struct doca_buf* buf);

/* Start as a stand-alone event (not a context); stop ends an export. */
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_start(struct doca_sync_event* event);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_stop(struct doca_sync_event* event);

/* ---- Export */

DOCA_EXPERIMENTAL doca_error_t doca_sync_event_export_to_remote_pci(struct doca_sync_event* event,
                                                                    struct doca_dev* dev,
                                                                    const uint8_t** data,
                                                                    size_t* sz);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_is_export_to_remote_pci_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_get_dpa_handle(struct doca_sync_event* event, struct doca_dpa* dpa,
                               doca_dpa_dev_sync_event_t* dpa_dev_se_handle);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_is_export_to_dpa_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_get_gpu_handle(
    struct doca_sync_event* event, struct doca_gpu* gpu, doca_gpu_dev_sync_event_t** gpu_dev_se);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_is_export_to_gpu_supported(const struct doca_devinfo* devinfo);
/* The blob a peer turns into a remote handle. The event must be started with a remote_net
 * publisher. The blob stays valid until the event is stopped or destroyed; it grants whoever
 * holds it get, set and add on the counter, so hand it only to the peer. */
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_export_to_remote_net(struct doca_sync_event* event,
                                                                    const uint8_t** data,
                                                                    size_t* sz);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_is_export_to_remote_net_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_remote_net_get_dpa_handle(
    struct doca_sync_event_remote_net* event, struct doca_dpa* dpa,
    doca_dpa_dev_sync_event_remote_net_t* dpa_remote_event);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_remote_net_is_export_to_dpa_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_remote_net_get_gpu_handle(
    struct doca_sync_event_remote_net* event, struct doca_gpu* gpu,
    doca_gpu_dev_sync_event_remote_net_t* gpu_remote_event);
DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_remote_net_is_export_to_gpu_supported(const struct doca_devinfo* devinfo);

/* ---- CPU operations (atomic; any thread) */

DOCA_EXPERIMENTAL doca_error_t doca_sync_event_get(struct doca_sync_event* event, uint64_t* value);
/* Adds value; *fetched gets the value before the add. */
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_update_add(struct doca_sync_event* event,
                                                          uint64_t value, uint64_t* fetched);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_update_set(struct doca_sync_event* event,
                                                          uint64_t value);
/* Waits until (counter & mask) > value, == value, or != value. As DOCA's, these waits have no
 * bound: they return only once the condition holds. The plain ones spin; the _yield ones call
 * sched_yield() between polls. They progress no engine and run no callback. Over zcstore a
 * peer's remote set or add on an exported event lands only when the owner's progress engine is
 * progressed (doca_pe_progress, by this thread or the one that drives it), as every RDMA
 * operation zcstore serves: a thread that waits here while nobody progresses that engine waits
 * for ever. To wait for a peer on the engine's own thread, loop doca_pe_progress and
 * doca_sync_event_get, or submit a wait_eq / wait_neq task of the event as a context. */
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_wait_gt(struct doca_sync_event* event,
                                                       uint64_t value, uint64_t mask);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_wait_gt_yield(struct doca_sync_event* event,
                                                             uint64_t value, uint64_t mask);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_wait_eq(struct doca_sync_event* event,
                                                       uint64_t value, uint64_t mask);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_wait_eq_yield(struct doca_sync_event* event,
                                                             uint64_t value, uint64_t mask);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_wait_neq(struct doca_sync_event* event,
                                                        uint64_t value, uint64_t mask);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_wait_neq_yield(struct doca_sync_event* event,
                                                              uint64_t value, uint64_t mask);

/* ---- The event as a DOCA context. Configure the task pools (*_set_conf) before doca_ctx_start;
 * a stand-alone started event is no context (as_ctx returns NULL). get, notify_set and
 * notify_add act at submit and complete from the next doca_pe_progress(); wait_eq and wait_neq
 * complete from the progress call that finds (counter & mask) == / != wait_val. Waits still
 * pending when the context stops complete through their error callback. Stopping the context
 * ends the event's export. In event mode, while a wait task is pending the engine counts as
 * busy: doca_pe_request_notification leaves its handle readable (the program progresses rather
 * than sleeps), and a CPU update_set/update_add wakes it. */

struct doca_sync_event_task_get;
struct doca_sync_event_task_notify_set;
struct doca_sync_event_task_notify_add;
struct doca_sync_event_task_wait_eq;
struct doca_sync_event_task_wait_neq;

typedef void (*doca_sync_event_task_get_completion_cb_t)(struct doca_sync_event_task_get* task,
                                                         union doca_data task_user_data,
                                                         union doca_data ctx_user_data);
typedef void (*doca_sync_event_task_notify_set_completion_cb_t)(
    struct doca_sync_event_task_notify_set* task, union doca_data task_user_data,
    union doca_data ctx_user_data);
typedef void (*doca_sync_event_task_notify_add_completion_cb_t)(
    struct doca_sync_event_task_notify_add* task, union doca_data task_user_data,
    union doca_data ctx_user_data);
typedef void (*doca_sync_event_task_wait_eq_completion_cb_t)(
    struct doca_sync_event_task_wait_eq* task, union doca_data task_user_data,
    union doca_data ctx_user_data);
typedef void (*doca_sync_event_task_wait_neq_completion_cb_t)(
    struct doca_sync_event_task_wait_neq* task, union doca_data task_user_data,
    union doca_data ctx_user_data);

DOCA_EXPERIMENTAL struct doca_ctx* doca_sync_event_as_ctx(struct doca_sync_event* event);

DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_task_get_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_task_get_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_get_completion_cb_t completion_cb,
    doca_sync_event_task_get_completion_cb_t error_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_task_get_alloc_init(
    struct doca_sync_event* event, uint64_t* ret_val_ptr, union doca_data user_data,
    struct doca_sync_event_task_get** task);
DOCA_EXPERIMENTAL struct doca_task* doca_sync_event_task_get_as_doca_task(
    struct doca_sync_event_task_get* task);
DOCA_EXPERIMENTAL void doca_sync_event_task_get_set_ret_val_ptr(
    struct doca_sync_event_task_get* task, uint64_t* ret_val_ptr);
DOCA_EXPERIMENTAL uint64_t* doca_sync_event_task_get_get_ret_val_ptr(
    const struct doca_sync_event_task_get* task);

DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_task_notify_set_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_task_notify_set_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_notify_set_completion_cb_t completion_cb,
    doca_sync_event_task_notify_set_completion_cb_t error_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_task_notify_set_alloc_init(
    struct doca_sync_event* event, uint64_t set_val, union doca_data user_data,
    struct doca_sync_event_task_notify_set** task);
DOCA_EXPERIMENTAL struct doca_task* doca_sync_event_task_notify_set_as_doca_task(
    struct doca_sync_event_task_notify_set* task);
DOCA_EXPERIMENTAL void doca_sync_event_task_notify_set_set_set_val(
    struct doca_sync_event_task_notify_set* task, uint64_t set_val);
DOCA_EXPERIMENTAL uint64_t
doca_sync_event_task_notify_set_get_set_val(const struct doca_sync_event_task_notify_set* task);

DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_task_notify_add_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_task_notify_add_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_notify_add_completion_cb_t completion_cb,
    doca_sync_event_task_notify_add_completion_cb_t error_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_task_notify_add_alloc_init(
    struct doca_sync_event* event, uint64_t inc_val, uint64_t* fetched_val_ptr,
    union doca_data user_data, struct doca_sync_event_task_notify_add** task);
DOCA_EXPERIMENTAL struct doca_task* doca_sync_event_task_notify_add_as_doca_task(
    struct doca_sync_event_task_notify_add* task);
DOCA_EXPERIMENTAL void doca_sync_event_task_notify_add_set_inc_val(
    struct doca_sync_event_task_notify_add* task, uint64_t inc_val);
DOCA_EXPERIMENTAL uint64_t
doca_sync_event_task_notify_add_get_inc_val(const struct doca_sync_event_task_notify_add* task);
DOCA_EXPERIMENTAL void doca_sync_event_task_notify_add_set_fetched_val_ptr(
    struct doca_sync_event_task_notify_add* task, uint64_t* fetched_val_ptr);
DOCA_EXPERIMENTAL uint64_t* doca_sync_event_task_notify_add_get_fetched_val_ptr(
    const struct doca_sync_event_task_notify_add* task);

DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_task_wait_eq_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_task_wait_eq_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_wait_eq_completion_cb_t completion_cb,
    doca_sync_event_task_wait_eq_completion_cb_t error_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_task_wait_eq_alloc_init(
    struct doca_sync_event* event, uint64_t wait_val, uint64_t mask, union doca_data user_data,
    struct doca_sync_event_task_wait_eq** task);
DOCA_EXPERIMENTAL struct doca_task* doca_sync_event_task_wait_eq_as_doca_task(
    struct doca_sync_event_task_wait_eq* task);
DOCA_EXPERIMENTAL void doca_sync_event_task_wait_eq_set_wait_val(
    struct doca_sync_event_task_wait_eq* task, uint64_t wait_val);
DOCA_EXPERIMENTAL uint64_t
doca_sync_event_task_wait_eq_get_wait_val(const struct doca_sync_event_task_wait_eq* task);
DOCA_EXPERIMENTAL void doca_sync_event_task_wait_eq_set_mask(
    struct doca_sync_event_task_wait_eq* task, uint64_t mask);
DOCA_EXPERIMENTAL uint64_t
doca_sync_event_task_wait_eq_get_mask(const struct doca_sync_event_task_wait_eq* task);

DOCA_EXPERIMENTAL doca_error_t
doca_sync_event_cap_task_wait_neq_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_task_wait_neq_set_conf(
    struct doca_sync_event* event, doca_sync_event_task_wait_neq_completion_cb_t completion_cb,
    doca_sync_event_task_wait_neq_completion_cb_t error_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_sync_event_task_wait_neq_alloc_init(
    struct doca_sync_event* event, uint64_t wait_val, uint64_t mask, union doca_data user_data,
    struct doca_sync_event_task_wait_neq** task);
DOCA_EXPERIMENTAL struct doca_task* doca_sync_event_task_wait_neq_as_doca_task(
    struct doca_sync_event_task_wait_neq* task);
DOCA_EXPERIMENTAL void doca_sync_event_task_wait_neq_set_wait_val(
    struct doca_sync_event_task_wait_neq* task, uint64_t wait_val);
DOCA_EXPERIMENTAL uint64_t
doca_sync_event_task_wait_neq_get_wait_val(const struct doca_sync_event_task_wait_neq* task);
DOCA_EXPERIMENTAL void doca_sync_event_task_wait_neq_set_mask(
    struct doca_sync_event_task_wait_neq* task, uint64_t mask);
DOCA_EXPERIMENTAL uint64_t
doca_sync_event_task_wait_neq_get_mask(const struct doca_sync_event_task_wait_neq* task);

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_SYNC_EVENT_H_ */
