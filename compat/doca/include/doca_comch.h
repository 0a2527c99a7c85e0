/*
 * DOCA Comch, the control path: a server (on BlueField, the service side) and clients (on the
 * host) exchange short messages over a connection. Here a channel is a Unix socket in this
 * user's private socket directory (docs/DOCA_COMPAT.md, "Comch"): server names are channel
 * names, a server serves clients of the same user only, and there is no PCIe.
 *
 * Both ends are contexts (doca_comch_server_as_ctx(), doca_comch_client_as_ctx()): configured
 * while idle, connected to a progress engine, started. A server is RUNNING once it listens; a
 * client is STARTING while it dials and RUNNING once its server has accepted it, and goes back to
 * idle when the connection is lost. Every event (a connection, a disconnection, a message) runs
 * inside doca_pe_progress() of the context's engine.
 *
 *   doca_comch_server_create(dev, NULL, "my_channel", &server);
 *   doca_comch_server_task_send_set_conf(server, sent_cb, send_error_cb, 8);
 *   doca_comch_server_event_msg_recv_register(server, message_cb);
 *   doca_comch_server_event_connection_status_changed_register(server, connect_cb, disconnect_cb);
 *   doca_pe_connect_ctx(pe, doca_comch_server_as_ctx(server));
 *   doca_ctx_start(doca_comch_server_as_ctx(server));
 *
 * Thread rules: DOCA's. A server or client, its connections and tasks belong to the thread of
 * its progress engine.
 */
#ifndef ZC_DOCA_COMCH_H_
#define ZC_DOCA_COMCH_H_

#include <stdint.h>

#include <doca_compat.h>
#include <doca_error.h>
#include <doca_types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct doca_dev;
struct doca_dev_rep;
struct doca_devinfo;
struct doca_ctx;
struct doca_task;

struct doca_comch_server;
struct doca_comch_client;
/* One established client-server channel: a server has one per client, a client exactly one. */
struct doca_comch_connection;
struct doca_comch_task_send;
struct doca_comch_event_msg_recv;
struct doca_comch_event_connection_status_changed;
struct doca_comch_event_consumer;

/* ---- Capabilities (the same for every device here) */

/* DOCA_SUCCESS: the device can run a server, or a client. */
DOCA_EXPERIMENTAL doca_error_t
doca_comch_cap_server_is_supported(const struct doca_devinfo* devinfo);
DOCA_EXPERIMENTAL doca_error_t
doca_comch_cap_client_is_supported(const struct doca_devinfo* devinfo);
/* Longest server name, counting the terminating NUL. */
DOCA_EXPERIMENTAL doca_error_t doca_comch_cap_get_max_name_len(const struct doca_devinfo* devinfo,
                                                               uint32_t* max_name_len);
/* Largest value doca_comch_*_set_max_msg_size() accepts. */
DOCA_EXPERIMENTAL doca_error_t doca_comch_cap_get_max_msg_size(const struct doca_devinfo* devinfo,
                                                               uint32_t* size);
DOCA_EXPERIMENTAL doca_error_t
doca_comch_cap_get_max_recv_queue_size(const struct doca_devinfo* devinfo, uint32_t* size);
/* Clients one server keeps at once; a further one is disconnected as soon as it connects. */
DOCA_EXPERIMENTAL doca_error_t doca_comch_cap_get_max_clients(const struct doca_devinfo* devinfo,
                                                              uint32_t* num_clients);
DOCA_EXPERIMENTAL doca_error_t doca_comch_cap_get_max_send_tasks(const struct doca_devinfo* devinfo,
                                                                 uint32_t* max_send_tasks);

/* ---- Server */

/*
 * A server of channel `name` (1 to doca_comch_cap_get_max_name_len() - 1 bytes) on `dev`. `repr`,
 * the host function served, is kept but not used: this facade has no representors, and a server
 * serves every client of its user that names its channel (NULL is accepted).
 */
DOCA_EXPERIMENTAL doca_error_t doca_comch_server_create(struct doca_dev* dev,
                                                        struct doca_dev_rep* repr, const char* name,
                                                        struct doca_comch_server** comch_server);
/* The server must be idle (BAD_STATE otherwise). */
DOCA_EXPERIMENTAL doca_error_t doca_comch_server_destroy(struct doca_comch_server* comch_server);
/*
 * Largest message this end sends or accepts (default 4080, DOCA's on BlueField). A message goes
 * through only when it fits both ends' sizes. Idle only.
 */
DOCA_EXPERIMENTAL doca_error_t
doca_comch_server_set_max_msg_size(struct doca_comch_server* comch_server, uint32_t size);
DOCA_EXPERIMENTAL doca_error_t
doca_comch_server_get_max_msg_size(const struct doca_comch_server* comch_server, uint32_t* size);
/* Messages handled per connection per doca_pe_progress() call. Idle only. */
DOCA_EXPERIMENTAL doca_error_t
doca_comch_server_set_recv_queue_size(struct doca_comch_server* comch_server, uint32_t size);
DOCA_EXPERIMENTAL doca_error_t
doca_comch_server_get_recv_queue_size(const struct doca_comch_server* comch_server, uint32_t* size);
DOCA_EXPERIMENTAL doca_error_t
doca_comch_server_get_device(const struct doca_comch_server* comch_server, struct doca_dev** dev);
DOCA_EXPERIMENTAL doca_error_t doca_comch_server_get_device_repr(
    const struct doca_comch_server* comch_server, struct doca_dev_rep** repr);
DOCA_EXPERIMENTAL struct doca_ctx* doca_comch_server_as_ctx(struct doca_comch_server* comch_server);
/* Closes one client's connection; the disconnect callback runs inside this call. */
DOCA_EXPERIMENTAL doca_error_t doca_comch_server_disconnect(
    struct doca_comch_server* comch_server, struct doca_comch_connection* connection);

/* ---- Client */

/* A client of the server of channel `name` on `dev`. */
DOCA_EXPERIMENTAL doca_error_t doca_comch_client_create(struct doca_dev* dev, const char* name,
                                                        struct doca_comch_client** comch_client);
/* The client must be idle (BAD_STATE otherwise). */
DOCA_EXPERIMENTAL doca_error_t doca_comch_client_destroy(struct doca_comch_client* comch_client);
DOCA_EXPERIMENTAL doca_error_t
doca_comch_client_set_max_msg_size(struct doca_comch_client* comch_client, uint32_t size);
DOCA_EXPERIMENTAL doca_error_t
doca_comch_client_get_max_msg_size(const struct doca_comch_client* comch_client, uint32_t* size);
DOCA_EXPERIMENTAL doca_error_t
doca_comch_client_set_recv_queue_size(struct doca_comch_client* comch_client, uint32_t size);
DOCA_EXPERIMENTAL doca_error_t
doca_comch_client_get_recv_queue_size(const struct doca_comch_client* comch_client, uint32_t* size);
DOCA_EXPERIMENTAL doca_error_t
doca_comch_client_get_device(const struct doca_comch_client* comch_client, struct doca_dev** dev);
DOCA_EXPERIMENTAL struct doca_ctx* doca_comch_client_as_ctx(struct doca_comch_client* comch_client);
/* The client's connection while it is running; BAD_STATE otherwise. */
DOCA_EXPERIMENTAL doca_error_t doca_comch_client_get_connection(
    const struct doca_comch_client* comch_client, struct doca_comch_connection** connection);

/* ---- Connections */

DOCA_EXPERIMENTAL doca_error_t doca_comch_connection_set_user_data(
    struct doca_comch_connection* connection, union doca_data user_data);
/* The user data set on the connection (zero until set). */
DOCA_EXPERIMENTAL union doca_data doca_comch_connection_get_user_data(
    const struct doca_comch_connection* connection);
/* The server a connection belongs to; NULL for a client's connection. */
DOCA_EXPERIMENTAL struct doca_comch_server* doca_comch_server_get_server_ctx(
    const struct doca_comch_connection* connection);
/* The client a connection belongs to; NULL for a server's connection. */
DOCA_EXPERIMENTAL struct doca_comch_client* doca_comch_client_get_client_ctx(
    const struct doca_comch_connection* connection);

/* ---- Send task: one message to the peer of a connection */

typedef void (*doca_comch_task_send_completion_cb_t)(struct doca_comch_task_send* task,
                                                     union doca_data task_user_data,
                                                     union doca_data ctx_user_data);

/* Both callbacks and at least one task (at most doca_comch_cap_get_max_send_tasks()). Idle only. */
DOCA_EXPERIMENTAL doca_error_t doca_comch_server_task_send_set_conf(
    struct doca_comch_server* comch_server, doca_comch_task_send_completion_cb_t task_completion_cb,
    doca_comch_task_send_completion_cb_t task_error_cb, uint32_t num_send_tasks);
DOCA_EXPERIMENTAL doca_error_t doca_comch_client_task_send_set_conf(
    struct doca_comch_client* comch_client, doca_comch_task_send_completion_cb_t task_completion_cb,
    doca_comch_task_send_completion_cb_t task_error_cb, uint32_t num_send_tasks);
/*
 * A task sending `len` bytes of `msg` (copied here, so `msg` may be reused at once) to `peer`, a
 * connection of this server or client. Running only. Errors: INVALID_VALUE (a NULL argument, an
 * empty message, another context's connection), BAD_STATE (not running, or no send task
 * configured), NOT_CONNECTED (the connection is gone), TOO_BIG (over the connection's limit, the
 * smaller of both ends' max message size), NO_MEMORY (every send task is in use).
 */
DOCA_EXPERIMENTAL doca_error_t doca_comch_server_task_send_alloc_init(
    struct doca_comch_server* comch_server, struct doca_comch_connection* peer, const void* msg,
    uint32_t len, struct doca_comch_task_send** task);
DOCA_EXPERIMENTAL doca_error_t doca_comch_client_task_send_alloc_init(
    struct doca_comch_client* comch_client, struct doca_comch_connection* peer, const void* msg,
    uint32_t len, struct doca_comch_task_send** task);
DOCA_EXPERIMENTAL struct doca_task* doca_comch_task_send_as_task(struct doca_comch_task_send* task);

/* ---- Events */

/* A message arrived on `comch_connection`; `recv_buffer` is valid only inside the callback. */
typedef void (*doca_comch_event_msg_recv_cb_t)(struct doca_comch_event_msg_recv* event,
                                               uint8_t* recv_buffer, uint32_t msg_len,
                                               struct doca_comch_connection* comch_connection);
DOCA_EXPERIMENTAL doca_error_t doca_comch_server_event_msg_recv_register(
    struct doca_comch_server* comch_server, doca_comch_event_msg_recv_cb_t recv_event_cb);
DOCA_EXPERIMENTAL doca_error_t doca_comch_client_event_msg_recv_register(
    struct doca_comch_client* comch_client, doca_comch_event_msg_recv_cb_t recv_event_cb);

/*
 * A client connected (connect callback) or its connection went away (disconnect callback: the
 * client stopped or died, doca_comch_server_disconnect(), or the server stopped). The connection
 * is valid until the disconnect callback returns. `change_successful` is 1.
 */
typedef void (*doca_comch_event_connection_status_changed_cb_t)(
    struct doca_comch_event_connection_status_changed* event,
    struct doca_comch_connection* comch_connection, uint8_t change_successful);
/* Both callbacks are required. Idle only. */
DOCA_EXPERIMENTAL doca_error_t doca_comch_server_event_connection_status_changed_register(
    struct doca_comch_server* comch_server,
    doca_comch_event_connection_status_changed_cb_t connect_event_cb,
    doca_comch_event_connection_status_changed_cb_t disconnect_event_cb);

/* ---- Connection statistics */

enum doca_comch_counter {
  DOCA_COMCH_COUNTER_SENT_MESSAGES = 1, /* messages this end sent on the connection */
  DOCA_COMCH_COUNTER_SENT_BYTES = 2,    /* their bytes */
  DOCA_COMCH_COUNTER_RECV_MESSAGES = 3, /* messages this end received on the connection */
  DOCA_COMCH_COUNTER_RECV_BYTES = 4,    /* their bytes */
};

/*
 * Takes a snapshot of the connection's counters for doca_comch_connection_get_counter(). A send
 * counts once it completed. CONNECTION_ABORTED once the connection is gone.
 */
DOCA_EXPERIMENTAL doca_error_t
doca_comch_connection_update_info(struct doca_comch_connection* comch_connection);
/* A counter as of the last doca_comch_connection_update_info() (0 before it). */
DOCA_EXPERIMENTAL doca_error_t
doca_comch_connection_get_counter(const struct doca_comch_connection* comch_connection,
                                  enum doca_comch_counter counter_type, uint64_t* counter_value);

/* ---- Consumer events (the fast path: not supported by this facade yet) */

typedef void (*doca_comch_event_consumer_cb_t)(struct doca_comch_event_consumer* event,
                                               struct doca_comch_connection* comch_connection,
                                               uint32_t id);
/* NOT_SUPPORTED: there are no doca_comch_consumer/doca_comch_producer contexts yet. */
DOCA_EXPERIMENTAL doca_error_t doca_comch_server_event_consumer_register(
    struct doca_comch_server* comch_server, doca_comch_event_consumer_cb_t new_consumer_event_cb,
    doca_comch_event_consumer_cb_t expired_consumer_event_cb);
DOCA_EXPERIMENTAL doca_error_t doca_comch_client_event_consumer_register(
    struct doca_comch_client* comch_client, doca_comch_event_consumer_cb_t new_consumer_event_cb,
    doca_comch_event_consumer_cb_t expired_consumer_event_cb);

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_COMCH_H_ */
