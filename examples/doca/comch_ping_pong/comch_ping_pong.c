/*
 * Comch ping-pong between two processes, written against the DOCA API only (seed 004's control
 * path): the client sends "ping #i <text>", the server answers each with "pong #i <text>" on the
 * connection it came on, the client checks each answer and sends the next ping, and stops after
 * N pongs; the server stops once that client has disconnected.
 *
 *   doca_comch_ping_pong --role server -d mlx5_0 --name my_channel -n 8 -t "Hi"
 *   doca_comch_ping_pong --role client -d mlx5_0 --name my_channel -n 8 -t "Hi"
 *
 * The two may start in either order: a client keeps dialling until its server is there.
 * Flags are DOCA's Arg Parser's (doca_argp): -h lists them, -j FILE reads them from JSON.
 * Exit status: 0 when all N pings were answered and every message arrived intact, 1 otherwise,
 * 2 for a bad command line.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <doca_argp.h>
#include <doca_comch.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_pe.h>

#include "example_argp.h"
#include "example_common.h"

DOCA_LOG_REGISTER(COMCH_PING_PONG);

#define MAX_MESSAGE_SIZE 256
#define MAX_PINGS 1024
#define MAX_NAME_LEN 100
#define SEND_TASKS 4
#define RUN_SECONDS 60
#define DEFAULT_TEXT "Hi DOCA Comch!"
#define DEFAULT_NAME "zcstore_comch_ping_pong"

/* Filled by the doca_argp callbacks, which copy each value (argp owns the one it passes). */
struct config {
  bool server;
  char device[DOCA_DEVINFO_IBDEV_NAME_SIZE];
  char name[MAX_NAME_LEN];
  char text[MAX_MESSAGE_SIZE - 16];
  uint32_t count;
};

struct resources {
  struct config cfg;
  struct doca_dev* dev;
  struct doca_pe* pe;
  struct doca_comch_server* server;
  struct doca_comch_client* client;
  struct doca_ctx* ctx;
  uint32_t exchanged; /* server: pings answered; client: pongs verified */
  bool done;          /* the context went back to idle after running */
  bool ran;
  doca_error_t result; /* first error */
};

static size_t message(const struct config* cfg, const char* kind, uint32_t i, char* out) {
  int n = snprintf(out, MAX_MESSAGE_SIZE, "%s #%u %s", kind, i, cfg->text);
  return n < 0 ? 0 : (size_t)n;
}

/* Records the first error and stops the context unless it is idle. */
static void fail(struct resources* res, doca_error_t err) {
  if (res->result == DOCA_SUCCESS) res->result = err;
  enum doca_ctx_states state;
  if (doca_ctx_get_state(res->ctx, &state) == DOCA_SUCCESS && state != DOCA_CTX_STATE_IDLE)
    (void)doca_ctx_stop(res->ctx);
}

static struct resources* resources_of(struct doca_comch_connection* connection) {
  struct doca_comch_server* server = doca_comch_server_get_server_ctx(connection);
  struct doca_ctx* ctx =
      server != NULL ? doca_comch_server_as_ctx(server)
                     : doca_comch_client_as_ctx(doca_comch_client_get_client_ctx(connection));
  union doca_data user_data = {.ptr = NULL};
  (void)doca_ctx_get_user_data(ctx, &user_data);
  return user_data.ptr;
}

/* Sends `kind` #i on `connection`; the bytes are copied, so `text` is free again at once. */
static doca_error_t send_message(struct resources* res, struct doca_comch_connection* connection,
                                 const char* kind, uint32_t i) {
  char text[MAX_MESSAGE_SIZE];
  size_t len = message(&res->cfg, kind, i, text);
  struct doca_comch_task_send* task;
  doca_error_t result = res->server != NULL
                            ? doca_comch_server_task_send_alloc_init(res->server, connection, text,
                                                                     (uint32_t)len, &task)
                            : doca_comch_client_task_send_alloc_init(res->client, connection, text,
                                                                     (uint32_t)len, &task);
  if (result != DOCA_SUCCESS) return result;
  result = doca_task_submit(doca_comch_task_send_as_task(task));
  if (result != DOCA_SUCCESS) doca_task_free(doca_comch_task_send_as_task(task));
  return result;
}

static void send_done(struct doca_comch_task_send* task, union doca_data task_user_data,
                      union doca_data ctx_user_data) {
  (void)task_user_data;
  (void)ctx_user_data;
  doca_task_free(doca_comch_task_send_as_task(task));
}

static void send_error(struct doca_comch_task_send* task, union doca_data task_user_data,
                       union doca_data ctx_user_data) {
  struct resources* res = ctx_user_data.ptr;
  doca_error_t err = doca_task_get_status(doca_comch_task_send_as_task(task));
  (void)task_user_data;
  DOCA_LOG_ERR("Send task failed: %s", doca_error_get_descr(err));
  doca_task_free(doca_comch_task_send_as_task(task));
  fail(res, err);
}

/* Checks that `buffer` is `kind` #expected; logs and fails otherwise. */
static bool check_message(struct resources* res, const char* kind, uint32_t expected,
                          const uint8_t* buffer, uint32_t len) {
  char wanted[MAX_MESSAGE_SIZE];
  size_t wanted_len = message(&res->cfg, kind, expected, wanted);
  if (len == wanted_len && memcmp(buffer, wanted, len) == 0) return true;
  DOCA_LOG_ERR("Message %u: got %u bytes \"%.*s\", expected \"%s\"", expected, len, (int)len,
               (const char*)buffer, wanted);
  fail(res, DOCA_ERROR_UNEXPECTED);
  return false;
}

static void server_received(struct doca_comch_event_msg_recv* event, uint8_t* buffer, uint32_t len,
                            struct doca_comch_connection* connection) {
  struct resources* res = resources_of(connection);
  doca_error_t result;
  (void)event;
  if (!check_message(res, "ping", res->exchanged, buffer, len)) return;
  DOCA_LOG_INFO("Server got: %.*s", (int)len, (const char*)buffer);
  result = send_message(res, connection, "pong", res->exchanged);
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to answer ping %u: %s", res->exchanged, doca_error_get_descr(result));
    fail(res, result);
    return;
  }
  res->exchanged++;
}

static void client_received(struct doca_comch_event_msg_recv* event, uint8_t* buffer, uint32_t len,
                            struct doca_comch_connection* connection) {
  struct resources* res = resources_of(connection);
  doca_error_t result;
  (void)event;
  if (!check_message(res, "pong", res->exchanged, buffer, len)) return;
  DOCA_LOG_INFO("Client got: %.*s", (int)len, (const char*)buffer);
  res->exchanged++;
  if (res->exchanged == res->cfg.count) {
    (void)doca_ctx_stop(res->ctx);
    return;
  }
  result = send_message(res, connection, "ping", res->exchanged);
  if (result != DOCA_SUCCESS) fail(res, result);
}

static void client_connected(struct doca_comch_event_connection_status_changed* event,
                             struct doca_comch_connection* connection, uint8_t successful) {
  (void)event;
  (void)successful;
  DOCA_LOG_INFO("Server: a client connected");
  (void)doca_comch_connection_set_user_data(connection, (union doca_data){.u64 = 1});
}

/* The server serves one exchange: once its client has gone, it stops. */
static void client_disconnected(struct doca_comch_event_connection_status_changed* event,
                                struct doca_comch_connection* connection, uint8_t successful) {
  struct resources* res = resources_of(connection);
  (void)event;
  (void)successful;
  DOCA_LOG_INFO("Server: the client disconnected after %u pings", res->exchanged);
  if (res->exchanged != res->cfg.count) res->result = DOCA_ERROR_CONNECTION_RESET;
  (void)doca_ctx_stop(res->ctx);
}

static void state_changed(const union doca_data user_data, struct doca_ctx* ctx,
                          enum doca_ctx_states prev_state, enum doca_ctx_states next_state) {
  struct resources* res = user_data.ptr;
  (void)ctx;
  (void)prev_state;
  if (next_state == DOCA_CTX_STATE_RUNNING) {
    res->ran = true;
    DOCA_LOG_INFO("%s is running", res->server != NULL ? "Server" : "Client");
    if (res->client != NULL) {
      struct doca_comch_connection* connection;
      doca_error_t result = doca_comch_client_get_connection(res->client, &connection);
      if (result == DOCA_SUCCESS) result = send_message(res, connection, "ping", 0);
      if (result != DOCA_SUCCESS) fail(res, result);
    }
  } else if (next_state == DOCA_CTX_STATE_IDLE) {
    if (!res->ran) {
      DOCA_LOG_ERR("No server named %s answered", res->cfg.name);
      if (res->result == DOCA_SUCCESS) res->result = DOCA_ERROR_NOT_FOUND;
    }
    res->done = true;
  }
}

static doca_error_t setup(struct resources* res) {
  doca_error_t result;
  const bool server = res->cfg.server;
  result = example_open_device(
      res->cfg.device,
      server ? doca_comch_cap_server_is_supported : doca_comch_cap_client_is_supported, &res->dev);
  if (result != DOCA_SUCCESS) return result;
  if ((result = doca_pe_create(&res->pe)) != DOCA_SUCCESS) return result;
  if (server) {
    /* No representor here: the facade serves every host function of this user. */
    if ((result = doca_comch_server_create(res->dev, NULL, res->cfg.name, &res->server)) !=
        DOCA_SUCCESS)
      return result;
    res->ctx = doca_comch_server_as_ctx(res->server);
    if ((result = doca_comch_server_task_send_set_conf(res->server, send_done, send_error,
                                                       SEND_TASKS)) != DOCA_SUCCESS ||
        (result = doca_comch_server_event_msg_recv_register(res->server, server_received)) !=
            DOCA_SUCCESS ||
        (result = doca_comch_server_event_connection_status_changed_register(
             res->server, client_connected, client_disconnected)) != DOCA_SUCCESS)
      return result;
  } else {
    if ((result = doca_comch_client_create(res->dev, res->cfg.name, &res->client)) != DOCA_SUCCESS)
      return result;
    res->ctx = doca_comch_client_as_ctx(res->client);
    if ((result = doca_comch_client_task_send_set_conf(res->client, send_done, send_error,
                                                       SEND_TASKS)) != DOCA_SUCCESS ||
        (result = doca_comch_client_event_msg_recv_register(res->client, client_received)) !=
            DOCA_SUCCESS)
      return result;
  }
  if ((result = doca_ctx_set_user_data(res->ctx, (union doca_data){.ptr = res})) != DOCA_SUCCESS ||
      (result = doca_ctx_set_state_changed_cb(res->ctx, state_changed)) != DOCA_SUCCESS ||
      (result = doca_pe_connect_ctx(res->pe, res->ctx)) != DOCA_SUCCESS)
    return result;
  result = doca_ctx_start(res->ctx);
  /* A client connects asynchronously: RUNNING comes through the state callback. */
  if (result != DOCA_ERROR_IN_PROGRESS) return result;
  DOCA_LOG_INFO("Client is connecting to %s", res->cfg.name);
  return DOCA_SUCCESS;
}

static void teardown(struct resources* res) {
  if (res->server != NULL) (void)doca_comch_server_destroy(res->server);
  if (res->client != NULL) (void)doca_comch_client_destroy(res->client);
  if (res->pe != NULL) (void)doca_pe_destroy(res->pe);
  if (res->dev != NULL) (void)doca_dev_close(res->dev);
}

/* Progresses until the context is idle again; after RUN_SECONDS it fails with TIME_OUT and
 * progresses a bounded while more so the context can reach idle. */
static void run(struct resources* res) {
  double deadline = example_now_seconds() + RUN_SECONDS;
  bool timed_out = false;
  while (!res->done) {
    if (doca_pe_progress(res->pe) == 0) example_pause_briefly();
    if (example_now_seconds() > deadline) {
      if (timed_out) {
        DOCA_LOG_ERR("The context did not stop");
        return;
      }
      DOCA_LOG_ERR("Timed out after %d seconds (%u of %u exchanged)", RUN_SECONDS, res->exchanged,
                   res->cfg.count);
      timed_out = true;
      fail(res, DOCA_ERROR_TIME_OUT);
      deadline = example_now_seconds() + 5;
    }
  }
}

static doca_error_t role_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  const char* role = (const char*)param;
  if (strcmp(role, "server") != 0 && strcmp(role, "client") != 0) {
    DOCA_LOG_ERR("--role is server or client, not %s", role);
    return DOCA_ERROR_INVALID_VALUE;
  }
  cfg->server = strcmp(role, "server") == 0;
  return DOCA_SUCCESS;
}

static doca_error_t device_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  return example_copy_string(param, cfg->device, sizeof(cfg->device));
}

static doca_error_t name_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  return example_copy_string(param, cfg->name, sizeof(cfg->name));
}

static doca_error_t text_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  return example_copy_string(param, cfg->text, sizeof(cfg->text));
}

static doca_error_t count_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  int n = *(int*)param;
  if (n <= 0 || n > MAX_PINGS) {
    DOCA_LOG_ERR("--count is 1 to %d, not %d", MAX_PINGS, n);
    return DOCA_ERROR_INVALID_VALUE;
  }
  cfg->count = (uint32_t)n;
  return DOCA_SUCCESS;
}

static doca_error_t register_flags(void) {
  doca_error_t result;
  if ((result = example_register_flag(NULL, "role", "<server|client>", "Which side this process is",
                                      DOCA_ARGP_TYPE_STRING, role_callback, true)) !=
          DOCA_SUCCESS ||
      (result = example_register_flag("d", "device", "<name>", "DOCA device (default mlx5_0)",
                                      DOCA_ARGP_TYPE_STRING, device_callback, false)) !=
          DOCA_SUCCESS ||
      (result = example_register_flag(
           NULL, "name", "<channel>", "Comch server name (default " DEFAULT_NAME ")",
           DOCA_ARGP_TYPE_STRING, name_callback, false)) != DOCA_SUCCESS ||
      (result = example_register_flag("t", "text", "<text>", "Text every message carries",
                                      DOCA_ARGP_TYPE_STRING, text_callback, false)) !=
          DOCA_SUCCESS ||
      (result = example_register_flag("n", "count", "<num>", "Number of pings (default 1)",
                                      DOCA_ARGP_TYPE_INT, count_callback, false)) != DOCA_SUCCESS)
    return result;
  return DOCA_SUCCESS;
}

static doca_error_t parse(int argc, char** argv, struct config* cfg) {
  snprintf(cfg->text, sizeof(cfg->text), "%s", DEFAULT_TEXT);
  snprintf(cfg->name, sizeof(cfg->name), "%s", DEFAULT_NAME);
  snprintf(cfg->device, sizeof(cfg->device), "mlx5_0");
  cfg->count = 1;
  doca_error_t result = doca_argp_init("doca_comch_ping_pong", cfg);
  if (result != DOCA_SUCCESS) return result;
  if ((result = register_flags()) == DOCA_SUCCESS) result = doca_argp_start(argc, argv);
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to parse the command line: %s", doca_error_get_descr(result));
  (void)doca_argp_destroy();
  return result;
}

int main(int argc, char** argv) {
  struct resources res;
  memset(&res, 0, sizeof(res));
  doca_error_t result = doca_log_backend_create_standard();
  if (result != DOCA_SUCCESS || parse(argc, argv, &res.cfg) != DOCA_SUCCESS) return 2;
  result = setup(&res);
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Setup failed: %s", doca_error_get_name(result));
    if (res.ctx != NULL) {
      enum doca_ctx_states state = DOCA_CTX_STATE_IDLE;
      fail(&res, result);
      if (doca_ctx_get_state(res.ctx, &state) == DOCA_SUCCESS && state != DOCA_CTX_STATE_IDLE)
        run(&res);
    }
    teardown(&res);
    return 1;
  }
  run(&res);
  teardown(&res);
  if (res.result == DOCA_SUCCESS && res.exchanged != res.cfg.count)
    res.result = DOCA_ERROR_UNEXPECTED;
  if (res.result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed: %s", doca_error_get_name(res.result));
    return 1;
  }
  if (res.cfg.server)
    DOCA_LOG_INFO("Server answered %u pings", res.exchanged);
  else
    DOCA_LOG_INFO("Client received %u pongs, %u verified", res.exchanged, res.exchanged);
  return 0;
}
