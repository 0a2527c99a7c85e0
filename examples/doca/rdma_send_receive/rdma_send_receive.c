/*
 * RDMA send/receive between two processes, written against the DOCA API only (seed 003's flow):
 * the receiver posts receive tasks, the sender sends N messages, the receiver checks each one.
 *
 *   doca_rdma_send_receive --role receive -d mlx5_0 -ld recv.desc -re send.desc -n 8
 *   doca_rdma_send_receive --role send    -d mlx5_0 -ld send.desc -re recv.desc -n 8 -s "Hi"
 *
 * Each side writes its connection descriptor to its -ld file in the STARTING callback and
 * connects to the peer's (-re) once that file appears, as DOCA's samples exchange descriptors
 * out of band. RDMA has no flow control for sends: the receiver writes "<ld>.ready" once its
 * receives are posted, and the sender waits for "<re>.ready" before sending.
 * Flags are DOCA's Arg Parser's (doca_argp): -h lists them, -j FILE reads them from JSON.
 * Exit status: 0 when every message was sent (sender) or received intact (receiver), 2 for a
 * bad command line.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <doca_argp.h>
#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_mmap.h>
#include <doca_pe.h>
#include <doca_rdma.h>

#include "example_argp.h"
#include "example_common.h"

DOCA_LOG_REGISTER(RDMA_SEND_RECEIVE);

#define MAX_MESSAGE_SIZE 256
#define MAX_MESSAGES 1024
#define RUN_SECONDS 60
#define DEFAULT_STRING "Hi DOCA RDMA!"
#define MAX_PATH_LEN 256

/* Filled by the doca_argp callbacks, which copy each value (argp owns the one it passes). */
struct config {
  bool sender;
  char device[DOCA_DEVINFO_IBDEV_NAME_SIZE];
  char local_path[MAX_PATH_LEN];
  char remote_path[MAX_PATH_LEN];
  char string[MAX_MESSAGE_SIZE - 15];
  uint32_t count;
};

/* Begins with the session: the context's user data is both (example_common.h). */
struct resources {
  struct example_session session;
  struct config cfg;
  struct doca_mmap* mmap;
  struct doca_buf_inventory* inventory;
  char* memory;
  uint32_t completed; /* sends acknowledged or messages received */
  uint32_t verified;  /* receiver: messages that matched */
};

static size_t expected_message(const struct config* cfg, uint32_t i, char* out) {
  int n = snprintf(out, MAX_MESSAGE_SIZE, "%s #%u", cfg->string, i);
  return n < 0 ? 0 : (size_t)n;
}

static void finish_one(struct resources* res) {
  res->completed++;
  if (res->completed == res->cfg.count) (void)doca_ctx_stop(res->session.ctx);
}

static void receive_done(struct doca_rdma_task_receive* task, union doca_data task_user_data,
                         union doca_data ctx_user_data) {
  struct resources* res = ctx_user_data.ptr;
  struct doca_buf* buf = doca_rdma_task_receive_get_dst_buf(task);
  char expected[MAX_MESSAGE_SIZE];
  /* Messages land in the receives in the order they were posted and sent. */
  size_t expected_len = expected_message(&res->cfg, res->completed, expected);
  void* data = NULL;
  size_t len = 0;
  (void)task_user_data;
  if (doca_buf_get_data(buf, &data) != DOCA_SUCCESS ||
      doca_buf_get_data_len(buf, &len) != DOCA_SUCCESS) {
    example_fail(&res->session, DOCA_ERROR_UNEXPECTED);
  } else if (len != expected_len || memcmp(data, expected, len) != 0) {
    DOCA_LOG_ERR("Message %u: got %zu bytes \"%.*s\", expected \"%s\"", res->completed, len,
                 (int)len, (const char*)data, expected);
    example_fail(&res->session, DOCA_ERROR_UNEXPECTED);
  } else {
    res->verified++;
    DOCA_LOG_INFO("Received message %u: %.*s", res->completed, (int)len, (const char*)data);
  }
  doca_task_free(doca_rdma_task_receive_as_task(task));
  (void)doca_buf_dec_refcount(buf, NULL);
  finish_one(res);
}

static void receive_error(struct doca_rdma_task_receive* task, union doca_data task_user_data,
                          union doca_data ctx_user_data) {
  struct resources* res = ctx_user_data.ptr;
  struct doca_buf* buf = doca_rdma_task_receive_get_dst_buf(task);
  doca_error_t err = doca_task_get_status(doca_rdma_task_receive_as_task(task));
  (void)task_user_data;
  DOCA_LOG_ERR("Receive task failed: %s", doca_error_get_descr(err));
  doca_task_free(doca_rdma_task_receive_as_task(task));
  (void)doca_buf_dec_refcount(buf, NULL);
  example_fail(&res->session, err);
}

static void send_done(struct doca_rdma_task_send* task, union doca_data task_user_data,
                      union doca_data ctx_user_data) {
  struct resources* res = ctx_user_data.ptr;
  struct doca_buf* buf = (struct doca_buf*)doca_rdma_task_send_get_src_buf(task);
  DOCA_LOG_INFO("Sent message %lu", (unsigned long)task_user_data.u64);
  doca_task_free(doca_rdma_task_send_as_task(task));
  (void)doca_buf_dec_refcount(buf, NULL);
  finish_one(res);
}

static void send_error(struct doca_rdma_task_send* task, union doca_data task_user_data,
                       union doca_data ctx_user_data) {
  struct resources* res = ctx_user_data.ptr;
  struct doca_buf* buf = (struct doca_buf*)doca_rdma_task_send_get_src_buf(task);
  doca_error_t err = doca_task_get_status(doca_rdma_task_send_as_task(task));
  DOCA_LOG_ERR("Send task %lu failed: %s", (unsigned long)task_user_data.u64,
               doca_error_get_descr(err));
  doca_task_free(doca_rdma_task_send_as_task(task));
  (void)doca_buf_dec_refcount(buf, NULL);
  example_fail(&res->session, err);
}

/* RUNNING, receiver: one receive task per message, then tell the sender. */
static doca_error_t post_receives(struct example_session* session) {
  struct resources* res = (struct resources*)session;
  for (uint32_t i = 0; i < res->cfg.count; i++) {
    struct doca_buf* buf = NULL;
    struct doca_rdma_task_receive* task = NULL;
    union doca_data user_data = {.u64 = i};
    doca_error_t result = doca_buf_inventory_buf_get_by_addr(
        res->inventory, res->mmap, res->memory + (size_t)i * MAX_MESSAGE_SIZE, MAX_MESSAGE_SIZE,
        &buf);
    if (result != DOCA_SUCCESS) return result;
    result = doca_rdma_task_receive_allocate_init(res->session.rdma, buf, user_data, &task);
    if (result == DOCA_SUCCESS) result = doca_task_submit(doca_rdma_task_receive_as_task(task));
    if (result != DOCA_SUCCESS) {
      DOCA_LOG_ERR("Failed to post receive %u: %s", i, doca_error_get_descr(result));
      if (task != NULL) doca_task_free(doca_rdma_task_receive_as_task(task));
      (void)doca_buf_dec_refcount(buf, NULL);
      return result;
    }
  }
  char ready[4096];
  if (snprintf(ready, sizeof(ready), "%s.ready", res->cfg.local_path) >= (int)sizeof(ready))
    return DOCA_ERROR_INVALID_VALUE;
  DOCA_LOG_INFO("Posted %u receive tasks", res->cfg.count);
  return example_write_file(ready, "ready\n", 6);
}

/* RUNNING, sender: wait for the receiver's receives, then send every message. */
static doca_error_t send_messages(struct example_session* session) {
  struct resources* res = (struct resources*)session;
  char ready[4096];
  void* ignored = NULL;
  size_t ignored_len = 0;
  if (snprintf(ready, sizeof(ready), "%s.ready", res->cfg.remote_path) >= (int)sizeof(ready))
    return DOCA_ERROR_INVALID_VALUE;
  doca_error_t result =
      example_read_peer_file(ready, EXAMPLE_PEER_WAIT_SECONDS, &ignored, &ignored_len);
  free(ignored);
  if (result != DOCA_SUCCESS) return result;
  for (uint32_t i = 0; i < res->cfg.count; i++) {
    char* slot = res->memory + (size_t)i * MAX_MESSAGE_SIZE;
    size_t len = expected_message(&res->cfg, i, slot);
    struct doca_buf* buf = NULL;
    struct doca_rdma_task_send* task = NULL;
    union doca_data user_data = {.u64 = i};
    result = doca_buf_inventory_buf_get_by_data(res->inventory, res->mmap, slot, len, &buf);
    if (result != DOCA_SUCCESS) return result;
    result = doca_rdma_task_send_allocate_init(res->session.rdma, NULL, buf, user_data, &task);
    if (result == DOCA_SUCCESS) result = doca_task_submit(doca_rdma_task_send_as_task(task));
    if (result != DOCA_SUCCESS) {
      DOCA_LOG_ERR("Failed to send message %u: %s", i, doca_error_get_descr(result));
      if (task != NULL) doca_task_free(doca_rdma_task_send_as_task(task));
      (void)doca_buf_dec_refcount(buf, NULL);
      return result;
    }
  }
  return DOCA_SUCCESS;
}

static doca_error_t setup(struct resources* res) {
  const size_t memory_len = (size_t)res->cfg.count * MAX_MESSAGE_SIZE;
  doca_error_t result =
      example_open_device(res->cfg.device, doca_rdma_cap_task_send_is_supported, &res->session.dev);
  if (result != DOCA_SUCCESS) return result;
  res->memory = calloc(1, memory_len);
  if (res->memory == NULL) return DOCA_ERROR_NO_MEMORY;
  if ((result = doca_mmap_create(&res->mmap)) != DOCA_SUCCESS ||
      (result = doca_mmap_set_memrange(res->mmap, res->memory, memory_len)) != DOCA_SUCCESS ||
      (result = doca_mmap_set_permissions(res->mmap, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE)) !=
          DOCA_SUCCESS ||
      (result = doca_mmap_add_dev(res->mmap, res->session.dev)) != DOCA_SUCCESS ||
      (result = doca_mmap_start(res->mmap)) != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to set up the memory map: %s", doca_error_get_descr(result));
    return result;
  }
  if ((result = doca_buf_inventory_create(res->cfg.count, &res->inventory)) != DOCA_SUCCESS ||
      (result = doca_buf_inventory_start(res->inventory)) != DOCA_SUCCESS)
    return result;
  if ((result = example_create_rdma(&res->session, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE)) !=
      DOCA_SUCCESS)
    return result;
  if (res->cfg.sender)
    result = doca_rdma_task_send_set_conf(res->session.rdma, send_done, send_error, res->cfg.count);
  else
    result = doca_rdma_task_receive_set_conf(res->session.rdma, receive_done, receive_error,
                                             res->cfg.count);
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to configure the tasks: %s", doca_error_get_descr(result));
    return result;
  }
  res->session.local_path = res->cfg.local_path;
  res->session.remote_path = res->cfg.remote_path;
  res->session.on_running = res->cfg.sender ? send_messages : post_receives;
  return example_start_rdma(&res->session);
}

static void teardown(struct resources* res) {
  example_destroy_rdma(&res->session);
  if (res->inventory != NULL) (void)doca_buf_inventory_destroy(res->inventory);
  if (res->mmap != NULL) (void)doca_mmap_destroy(res->mmap);
  if (res->session.dev != NULL) (void)doca_dev_close(res->session.dev);
  free(res->memory);
}

static doca_error_t role_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  const char* role = (const char*)param;
  if (strcmp(role, "send") != 0 && strcmp(role, "receive") != 0) {
    DOCA_LOG_ERR("--role is send or receive, not %s", role);
    return DOCA_ERROR_INVALID_VALUE;
  }
  cfg->sender = strcmp(role, "send") == 0;
  return DOCA_SUCCESS;
}

static doca_error_t device_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  return example_copy_string(param, cfg->device, sizeof(cfg->device));
}

static doca_error_t local_path_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  return example_copy_string(param, cfg->local_path, sizeof(cfg->local_path));
}

static doca_error_t remote_path_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  return example_copy_string(param, cfg->remote_path, sizeof(cfg->remote_path));
}

static doca_error_t string_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  return example_copy_string(param, cfg->string, sizeof(cfg->string));
}

static doca_error_t count_callback(void* param, void* config) {
  struct config* cfg = (struct config*)config;
  int n = *(int*)param;
  if (n <= 0 || n > MAX_MESSAGES) {
    DOCA_LOG_ERR("--count is 1 to %d, not %d", MAX_MESSAGES, n);
    return DOCA_ERROR_INVALID_VALUE;
  }
  cfg->count = (uint32_t)n;
  return DOCA_SUCCESS;
}

/* The flags, as a DOCA sample declares them; -ld and -re are DOCA's two-letter short names. */
static doca_error_t register_flags(void) {
  doca_error_t result;
  if ((result = example_register_flag(NULL, "role", "<send|receive>", "Which side this process is",
                                      DOCA_ARGP_TYPE_STRING, role_callback, true)) !=
          DOCA_SUCCESS ||
      (result = example_register_flag("d", "device", "<name>", "DOCA device (default mlx5_0)",
                                      DOCA_ARGP_TYPE_STRING, device_callback, false)) !=
          DOCA_SUCCESS ||
      (result = example_register_flag("ld", "local-descriptor-path", "<path>",
                                      "File this side writes its connection descriptor to",
                                      DOCA_ARGP_TYPE_STRING, local_path_callback, true)) !=
          DOCA_SUCCESS ||
      (result = example_register_flag("re", "remote-descriptor-path", "<path>",
                                      "File the peer writes its connection descriptor to",
                                      DOCA_ARGP_TYPE_STRING, remote_path_callback, true)) !=
          DOCA_SUCCESS ||
      (result = example_register_flag("s", "send-string", "<text>", "Message text (sender)",
                                      DOCA_ARGP_TYPE_STRING, string_callback, false)) !=
          DOCA_SUCCESS ||
      (result = example_register_flag("n", "count", "<num>", "Number of messages (default 1)",
                                      DOCA_ARGP_TYPE_INT, count_callback, false)) != DOCA_SUCCESS)
    return result;
  return DOCA_SUCCESS;
}

/*
 * Defaults, then the command line (or a -j JSON file) through doca_argp. The callbacks copy
 * every value into cfg, so the parser is done with when this returns.
 */
static doca_error_t parse(int argc, char** argv, struct config* cfg) {
  snprintf(cfg->string, sizeof(cfg->string), "%s", DEFAULT_STRING);
  cfg->count = 1;
  snprintf(cfg->device, sizeof(cfg->device), "mlx5_0");
  doca_error_t result = doca_argp_init("doca_rdma_send_receive", cfg);
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
    if (res.session.ctx != NULL) (void)doca_ctx_stop(res.session.ctx);
    teardown(&res);
    return 1;
  }
  example_run(&res.session, RUN_SECONDS, NULL);
  teardown(&res);
  if (res.session.result == DOCA_SUCCESS && res.completed != res.cfg.count)
    res.session.result = DOCA_ERROR_UNEXPECTED;
  if (res.session.result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed: %s", doca_error_get_name(res.session.result));
    return 1;
  }
  if (res.cfg.sender)
    DOCA_LOG_INFO("Sent %u messages", res.completed);
  else
    DOCA_LOG_INFO("Received %u messages, %u verified", res.completed, res.verified);
  return 0;
}
