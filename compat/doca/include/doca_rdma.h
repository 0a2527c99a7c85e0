/*
 * DOCA RDMA: one side of a reliable connection. Flow (seed 003): create over a device, configure
 * permissions and task pools, connect to a progress engine, start; in the STARTING callback
 * export the connection blob, hand it to the peer out of band and connect to the peer's blob;
 * the context then reaches RUNNING from doca_pe_progress(). Over zcstore the connection runs on
 * UCX (shared memory, TCP, or verbs); the API follows DOCA 2.9 (rdma_connection arguments).
 * Differences from hardware are listed in docs/DOCA_COMPAT.md (one connection per context, no
 * RNR retry: a send with no receive posted on the peer fails with DOCA_ERROR_EMPTY).
 */
#ifndef ZC_DOCA_RDMA_H_
#define ZC_DOCA_RDMA_H_

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
struct doca_rdma;
struct doca_rdma_connection;
struct doca_task;

enum doca_rdma_transport_type {
  DOCA_RDMA_TRANSPORT_TYPE_RC = 0,
  DOCA_RDMA_TRANSPORT_TYPE_DC = 1,
};

/* What a completed receive task received. */
enum doca_rdma_opcode {
  DOCA_RDMA_OPCODE_RECV_SEND = 0,
  DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM = 1,
  DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM = 2,
};

DOCA_EXPERIMENTAL doca_error_t doca_rdma_create(struct doca_dev* dev, struct doca_rdma** rdma);
/* The context must be idle. */
DOCA_EXPERIMENTAL doca_error_t doca_rdma_destroy(struct doca_rdma* rdma);
DOCA_EXPERIMENTAL struct doca_ctx* doca_rdma_as_ctx(struct doca_rdma* rdma);

/* The connection blob for the peer (owned by the context). After doca_ctx_start(). */
DOCA_EXPERIMENTAL doca_error_t doca_rdma_export(struct doca_rdma* rdma,
                                                const void** local_rdma_conn_details,
                                                size_t* local_rdma_conn_details_size,
                                                struct doca_rdma_connection** rdma_connection);
/* Connects to the peer's blob (validated before use); RUNNING follows from doca_pe_progress(). */
DOCA_EXPERIMENTAL doca_error_t doca_rdma_connect(struct doca_rdma* rdma,
                                                 const void* remote_rdma_conn_details,
                                                 size_t remote_rdma_conn_details_size,
                                                 struct doca_rdma_connection* rdma_connection);

/* What the peer may do to memory this side exported (enum doca_access_flag mask). Idle only. */
DOCA_EXPERIMENTAL doca_error_t doca_rdma_set_permissions(struct doca_rdma* rdma,
                                                         uint32_t permissions);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_get_permissions(const struct doca_rdma* rdma,
                                                         uint32_t* permissions);
/* Accepted and ignored: routing is UCX's. */
DOCA_EXPERIMENTAL doca_error_t doca_rdma_set_grh_enabled(struct doca_rdma* rdma,
                                                         uint8_t grh_enabled);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_set_gid_index(struct doca_rdma* rdma, uint32_t gid_index);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_set_send_queue_size(struct doca_rdma* rdma,
                                                             uint32_t send_queue_size);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_set_recv_queue_size(struct doca_rdma* rdma,
                                                             uint32_t recv_queue_size);
/* RC only; DC is NOT_SUPPORTED. */
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_set_transport_type(struct doca_rdma* rdma, enum doca_rdma_transport_type transport_type);
/* 1 only in this slice; more is NOT_SUPPORTED. */
DOCA_EXPERIMENTAL doca_error_t doca_rdma_set_max_num_connections(struct doca_rdma* rdma,
                                                                 uint16_t max_num_connections);

/* Capabilities: every device of the table supports the four task types here. */
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_cap_task_receive_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_cap_task_send_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_cap_task_write_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_cap_task_read_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_cap_get_max_send_buf_list_len(
    const struct doca_devinfo* devinfo, uint32_t* max_send_buf_list_len);
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_cap_get_max_message_size(const struct doca_devinfo* devinfo, uint32_t* max_message_size);

/* ---- Receive: a posted buffer for the peer's next send. Received bytes are appended after the
 * destination's data section. */
struct doca_rdma_task_receive;
typedef void (*doca_rdma_task_receive_completion_cb_t)(struct doca_rdma_task_receive* task,
                                                       union doca_data task_user_data,
                                                       union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_receive_set_conf(
    struct doca_rdma* rdma, doca_rdma_task_receive_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_receive_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_receive_allocate_init(
    struct doca_rdma* rdma, struct doca_buf* dst_buf, union doca_data user_data,
    struct doca_rdma_task_receive** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_receive_as_task(
    struct doca_rdma_task_receive* task);
DOCA_EXPERIMENTAL void doca_rdma_task_receive_set_dst_buf(struct doca_rdma_task_receive* task,
                                                          struct doca_buf* dst_buf);
DOCA_EXPERIMENTAL struct doca_buf* doca_rdma_task_receive_get_dst_buf(
    const struct doca_rdma_task_receive* task);
DOCA_EXPERIMENTAL enum doca_rdma_opcode doca_rdma_task_receive_get_result_opcode(
    const struct doca_rdma_task_receive* task);
/* The immediate value, in network byte order as DOCA gives it. */
DOCA_EXPERIMENTAL doca_be32_t
doca_rdma_task_receive_get_result_immediate_data(const struct doca_rdma_task_receive* task);
DOCA_EXPERIMENTAL struct doca_rdma_connection* doca_rdma_task_receive_get_result_rdma_connection(
    const struct doca_rdma_task_receive* task);

/* ---- Send: the source's data section to the peer's next posted receive. */
struct doca_rdma_task_send;
typedef void (*doca_rdma_task_send_completion_cb_t)(struct doca_rdma_task_send* task,
                                                    union doca_data task_user_data,
                                                    union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_send_set_conf(
    struct doca_rdma* rdma, doca_rdma_task_send_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_send_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
/* `rdma_connection` may be NULL: the context's one connection. */
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_send_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    const struct doca_buf* src_buf, union doca_data user_data, struct doca_rdma_task_send** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_send_as_task(struct doca_rdma_task_send* task);
DOCA_EXPERIMENTAL void doca_rdma_task_send_set_src_buf(struct doca_rdma_task_send* task,
                                                       const struct doca_buf* src_buf);
DOCA_EXPERIMENTAL const struct doca_buf* doca_rdma_task_send_get_src_buf(
    const struct doca_rdma_task_send* task);

/* ---- Write: the local source's data section into remote memory (a buffer of a map created from
 * the peer's export), appended after the destination's data section. */
struct doca_rdma_task_write;
typedef void (*doca_rdma_task_write_completion_cb_t)(struct doca_rdma_task_write* task,
                                                     union doca_data task_user_data,
                                                     union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_write_set_conf(
    struct doca_rdma* rdma, doca_rdma_task_write_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_write_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_write_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    const struct doca_buf* src_buf, struct doca_buf* dst_buf, union doca_data user_data,
    struct doca_rdma_task_write** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_write_as_task(struct doca_rdma_task_write* task);
DOCA_EXPERIMENTAL void doca_rdma_task_write_set_src_buf(struct doca_rdma_task_write* task,
                                                        const struct doca_buf* src_buf);
DOCA_EXPERIMENTAL void doca_rdma_task_write_set_dst_buf(struct doca_rdma_task_write* task,
                                                        struct doca_buf* dst_buf);
DOCA_EXPERIMENTAL const struct doca_buf* doca_rdma_task_write_get_src_buf(
    const struct doca_rdma_task_write* task);
DOCA_EXPERIMENTAL struct doca_buf* doca_rdma_task_write_get_dst_buf(
    const struct doca_rdma_task_write* task);

/* ---- Read: remote memory's data section into the local destination (appended). */
struct doca_rdma_task_read;
typedef void (*doca_rdma_task_read_completion_cb_t)(struct doca_rdma_task_read* task,
                                                    union doca_data task_user_data,
                                                    union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_read_set_conf(
    struct doca_rdma* rdma, doca_rdma_task_read_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_read_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_read_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    const struct doca_buf* src_buf, struct doca_buf* dst_buf, union doca_data user_data,
    struct doca_rdma_task_read** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_read_as_task(struct doca_rdma_task_read* task);
DOCA_EXPERIMENTAL void doca_rdma_task_read_set_src_buf(struct doca_rdma_task_read* task,
                                                       const struct doca_buf* src_buf);
DOCA_EXPERIMENTAL void doca_rdma_task_read_set_dst_buf(struct doca_rdma_task_read* task,
                                                       struct doca_buf* dst_buf);
DOCA_EXPERIMENTAL const struct doca_buf* doca_rdma_task_read_get_src_buf(
    const struct doca_rdma_task_read* task);
DOCA_EXPERIMENTAL struct doca_buf* doca_rdma_task_read_get_dst_buf(
    const struct doca_rdma_task_read* task);

/* ---- Send with immediate: a send that also hands the peer's receive a 32-bit value. */
struct doca_rdma_task_send_imm;
typedef void (*doca_rdma_task_send_imm_completion_cb_t)(struct doca_rdma_task_send_imm* task,
                                                        union doca_data task_user_data,
                                                        union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_cap_task_send_imm_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_send_imm_set_conf(
    struct doca_rdma* rdma, doca_rdma_task_send_imm_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_send_imm_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_send_imm_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    const struct doca_buf* src_buf, doca_be32_t immediate_data, union doca_data user_data,
    struct doca_rdma_task_send_imm** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_send_imm_as_task(
    struct doca_rdma_task_send_imm* task);
DOCA_EXPERIMENTAL void doca_rdma_task_send_imm_set_src_buf(struct doca_rdma_task_send_imm* task,
                                                           const struct doca_buf* src_buf);
DOCA_EXPERIMENTAL const struct doca_buf* doca_rdma_task_send_imm_get_src_buf(
    const struct doca_rdma_task_send_imm* task);
DOCA_EXPERIMENTAL void doca_rdma_task_send_imm_set_immediate_data(
    struct doca_rdma_task_send_imm* task, doca_be32_t immediate_data);
DOCA_EXPERIMENTAL doca_be32_t
doca_rdma_task_send_imm_get_immediate_data(const struct doca_rdma_task_send_imm* task);

/* ---- Write with immediate: a write that also completes the peer's next posted receive, with
 * opcode DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM and the immediate value. */
struct doca_rdma_task_write_imm;
typedef void (*doca_rdma_task_write_imm_completion_cb_t)(struct doca_rdma_task_write_imm* task,
                                                         union doca_data task_user_data,
                                                         union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_cap_task_write_imm_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_write_imm_set_conf(
    struct doca_rdma* rdma, doca_rdma_task_write_imm_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_write_imm_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_write_imm_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    const struct doca_buf* src_buf, struct doca_buf* dst_buf, doca_be32_t immediate_data,
    union doca_data user_data, struct doca_rdma_task_write_imm** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_write_imm_as_task(
    struct doca_rdma_task_write_imm* task);
DOCA_EXPERIMENTAL void doca_rdma_task_write_imm_set_src_buf(struct doca_rdma_task_write_imm* task,
                                                            const struct doca_buf* src_buf);
DOCA_EXPERIMENTAL void doca_rdma_task_write_imm_set_dst_buf(struct doca_rdma_task_write_imm* task,
                                                            struct doca_buf* dst_buf);
DOCA_EXPERIMENTAL const struct doca_buf* doca_rdma_task_write_imm_get_src_buf(
    const struct doca_rdma_task_write_imm* task);
DOCA_EXPERIMENTAL struct doca_buf* doca_rdma_task_write_imm_get_dst_buf(
    const struct doca_rdma_task_write_imm* task);
DOCA_EXPERIMENTAL void doca_rdma_task_write_imm_set_immediate_data(
    struct doca_rdma_task_write_imm* task, doca_be32_t immediate_data);
DOCA_EXPERIMENTAL doca_be32_t
doca_rdma_task_write_imm_get_immediate_data(const struct doca_rdma_task_write_imm* task);

/* ---- Atomics on the first 8 bytes of the remote destination's data section (8-byte aligned,
 * a map exported with DOCA_ACCESS_FLAG_RDMA_ATOMIC). The old value is appended to the local
 * result buffer. */
struct doca_rdma_task_atomic_cmp_swp;
typedef void (*doca_rdma_task_atomic_cmp_swp_completion_cb_t)(
    struct doca_rdma_task_atomic_cmp_swp* task, union doca_data task_user_data,
    union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_cap_task_atomic_cmp_swp_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_atomic_cmp_swp_set_conf(
    struct doca_rdma* rdma,
    doca_rdma_task_atomic_cmp_swp_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_atomic_cmp_swp_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_atomic_cmp_swp_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection, struct doca_buf* dst_buf,
    struct doca_buf* result_buf, uint64_t cmp_data, uint64_t swap_data, union doca_data user_data,
    struct doca_rdma_task_atomic_cmp_swp** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_atomic_cmp_swp_as_task(
    struct doca_rdma_task_atomic_cmp_swp* task);
DOCA_EXPERIMENTAL void doca_rdma_task_atomic_cmp_swp_set_dst_buf(
    struct doca_rdma_task_atomic_cmp_swp* task, struct doca_buf* dst_buf);
DOCA_EXPERIMENTAL void doca_rdma_task_atomic_cmp_swp_set_result_buf(
    struct doca_rdma_task_atomic_cmp_swp* task, struct doca_buf* result_buf);
DOCA_EXPERIMENTAL void doca_rdma_task_atomic_cmp_swp_set_cmp_data(
    struct doca_rdma_task_atomic_cmp_swp* task, uint64_t cmp_data);
DOCA_EXPERIMENTAL void doca_rdma_task_atomic_cmp_swp_set_swap_data(
    struct doca_rdma_task_atomic_cmp_swp* task, uint64_t swap_data);
DOCA_EXPERIMENTAL struct doca_buf* doca_rdma_task_atomic_cmp_swp_get_dst_buf(
    const struct doca_rdma_task_atomic_cmp_swp* task);
DOCA_EXPERIMENTAL struct doca_buf* doca_rdma_task_atomic_cmp_swp_get_result_buf(
    const struct doca_rdma_task_atomic_cmp_swp* task);
DOCA_EXPERIMENTAL uint64_t
doca_rdma_task_atomic_cmp_swp_get_cmp_data(const struct doca_rdma_task_atomic_cmp_swp* task);
DOCA_EXPERIMENTAL uint64_t
doca_rdma_task_atomic_cmp_swp_get_swap_data(const struct doca_rdma_task_atomic_cmp_swp* task);

struct doca_rdma_task_atomic_fetch_add;
typedef void (*doca_rdma_task_atomic_fetch_add_completion_cb_t)(
    struct doca_rdma_task_atomic_fetch_add* task, union doca_data task_user_data,
    union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_cap_task_atomic_fetch_add_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_atomic_fetch_add_set_conf(
    struct doca_rdma* rdma,
    doca_rdma_task_atomic_fetch_add_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_atomic_fetch_add_completion_cb_t error_task_completion_cb, uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_atomic_fetch_add_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection, struct doca_buf* dst_buf,
    struct doca_buf* result_buf, uint64_t add_data, union doca_data user_data,
    struct doca_rdma_task_atomic_fetch_add** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_atomic_fetch_add_as_task(
    struct doca_rdma_task_atomic_fetch_add* task);
DOCA_EXPERIMENTAL void doca_rdma_task_atomic_fetch_add_set_dst_buf(
    struct doca_rdma_task_atomic_fetch_add* task, struct doca_buf* dst_buf);
DOCA_EXPERIMENTAL void doca_rdma_task_atomic_fetch_add_set_result_buf(
    struct doca_rdma_task_atomic_fetch_add* task, struct doca_buf* result_buf);
DOCA_EXPERIMENTAL void doca_rdma_task_atomic_fetch_add_set_add_data(
    struct doca_rdma_task_atomic_fetch_add* task, uint64_t add_data);
DOCA_EXPERIMENTAL struct doca_buf* doca_rdma_task_atomic_fetch_add_get_dst_buf(
    const struct doca_rdma_task_atomic_fetch_add* task);
DOCA_EXPERIMENTAL struct doca_buf* doca_rdma_task_atomic_fetch_add_get_result_buf(
    const struct doca_rdma_task_atomic_fetch_add* task);
DOCA_EXPERIMENTAL uint64_t
doca_rdma_task_atomic_fetch_add_get_add_data(const struct doca_rdma_task_atomic_fetch_add* task);

/* ---- Remote sync events: get, set and add on a peer's doca_sync_event through its remote handle
 * (doca_sync_event_remote_net_create_from_export). The peer's doca_rdma must grant the access
 * (RDMA_READ for get, RDMA_WRITE for set, RDMA_ATOMIC for add). */
struct doca_sync_event_remote_net;

/* Appends the event's value (8 bytes) after dst_buf's data section. */
struct doca_rdma_task_remote_net_sync_event_get;
typedef void (*doca_rdma_task_remote_net_sync_event_get_completion_cb_t)(
    struct doca_rdma_task_remote_net_sync_event_get* task, union doca_data task_user_data,
    union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t
doca_rdma_cap_task_remote_net_sync_event_get_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_remote_net_sync_event_get_set_conf(
    struct doca_rdma* rdma,
    doca_rdma_task_remote_net_sync_event_get_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_remote_net_sync_event_get_completion_cb_t error_task_completion_cb,
    uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_remote_net_sync_event_get_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    const struct doca_sync_event_remote_net* event, struct doca_buf* dst_buf,
    union doca_data user_data, struct doca_rdma_task_remote_net_sync_event_get** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_remote_net_sync_event_get_as_task(
    struct doca_rdma_task_remote_net_sync_event_get* task);
DOCA_EXPERIMENTAL void doca_rdma_task_remote_net_sync_event_get_set_sync_event(
    struct doca_rdma_task_remote_net_sync_event_get* task,
    const struct doca_sync_event_remote_net* event);
DOCA_EXPERIMENTAL const struct doca_sync_event_remote_net*
doca_rdma_task_remote_net_sync_event_get_get_sync_event(
    const struct doca_rdma_task_remote_net_sync_event_get* task);
DOCA_EXPERIMENTAL void doca_rdma_task_remote_net_sync_event_get_set_dst_buf(
    struct doca_rdma_task_remote_net_sync_event_get* task, struct doca_buf* dst_buf);
DOCA_EXPERIMENTAL struct doca_buf* doca_rdma_task_remote_net_sync_event_get_get_dst_buf(
    const struct doca_rdma_task_remote_net_sync_event_get* task);

/* Sets the event to the 8 bytes at the start of src_buf's data section (one atomic store). */
struct doca_rdma_task_remote_net_sync_event_notify_set;
typedef void (*doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t)(
    struct doca_rdma_task_remote_net_sync_event_notify_set* task, union doca_data task_user_data,
    union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_cap_task_remote_net_sync_event_notify_set_is_supported(
    const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_remote_net_sync_event_notify_set_set_conf(
    struct doca_rdma* rdma,
    doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t error_task_completion_cb,
    uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    struct doca_sync_event_remote_net* event, const struct doca_buf* src_buf,
    union doca_data user_data, struct doca_rdma_task_remote_net_sync_event_notify_set** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_remote_net_sync_event_notify_set_as_task(
    struct doca_rdma_task_remote_net_sync_event_notify_set* task);
DOCA_EXPERIMENTAL void doca_rdma_task_remote_net_sync_event_notify_set_set_sync_event(
    struct doca_rdma_task_remote_net_sync_event_notify_set* task,
    struct doca_sync_event_remote_net* event);
DOCA_EXPERIMENTAL struct doca_sync_event_remote_net*
doca_rdma_task_remote_net_sync_event_notify_set_get_sync_event(
    const struct doca_rdma_task_remote_net_sync_event_notify_set* task);
DOCA_EXPERIMENTAL void doca_rdma_task_remote_net_sync_event_notify_set_set_src_buf(
    struct doca_rdma_task_remote_net_sync_event_notify_set* task, const struct doca_buf* src_buf);
DOCA_EXPERIMENTAL const struct doca_buf*
doca_rdma_task_remote_net_sync_event_notify_set_get_src_buf(
    const struct doca_rdma_task_remote_net_sync_event_notify_set* task);

/* Adds add_data to the event atomically; the value before the add is appended to result_buf. */
struct doca_rdma_task_remote_net_sync_event_notify_add;
typedef void (*doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t)(
    struct doca_rdma_task_remote_net_sync_event_notify_add* task, union doca_data task_user_data,
    union doca_data ctx_user_data);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_cap_task_remote_net_sync_event_notify_add_is_supported(
    const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_remote_net_sync_event_notify_add_set_conf(
    struct doca_rdma* rdma,
    doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t successful_task_completion_cb,
    doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t error_task_completion_cb,
    uint32_t num_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
    struct doca_rdma* rdma, struct doca_rdma_connection* rdma_connection,
    struct doca_sync_event_remote_net* event, struct doca_buf* result_buf, uint64_t add_data,
    union doca_data user_data, struct doca_rdma_task_remote_net_sync_event_notify_add** task);
DOCA_EXPERIMENTAL struct doca_task* doca_rdma_task_remote_net_sync_event_notify_add_as_task(
    struct doca_rdma_task_remote_net_sync_event_notify_add* task);
DOCA_EXPERIMENTAL void doca_rdma_task_remote_net_sync_event_notify_add_set_sync_event(
    struct doca_rdma_task_remote_net_sync_event_notify_add* task,
    struct doca_sync_event_remote_net* event);
DOCA_EXPERIMENTAL struct doca_sync_event_remote_net*
doca_rdma_task_remote_net_sync_event_notify_add_get_sync_event(
    const struct doca_rdma_task_remote_net_sync_event_notify_add* task);
DOCA_EXPERIMENTAL void doca_rdma_task_remote_net_sync_event_notify_add_set_result_buf(
    struct doca_rdma_task_remote_net_sync_event_notify_add* task, struct doca_buf* result_buf);
DOCA_EXPERIMENTAL struct doca_buf* doca_rdma_task_remote_net_sync_event_notify_add_get_result_buf(
    const struct doca_rdma_task_remote_net_sync_event_notify_add* task);
DOCA_EXPERIMENTAL void doca_rdma_task_remote_net_sync_event_notify_add_set_add_data(
    struct doca_rdma_task_remote_net_sync_event_notify_add* task, uint64_t add_data);
DOCA_EXPERIMENTAL uint64_t doca_rdma_task_remote_net_sync_event_notify_add_get_add_data(
    const struct doca_rdma_task_remote_net_sync_event_notify_add* task);

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_RDMA_H_ */
