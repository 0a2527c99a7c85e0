/*
 * Remote sync events between two processes, written against the DOCA API only (seed 003's sync
 * event requester/responder): the responder owns a sync event and exports it; the requester
 * sets it remotely, reads it back until the responder answered, then adds to it remotely to say
 * it is done.
 *
 *   doca_rdma_sync_event --role responder -d mlx5_0 -ld resp.desc -re req.desc -se resp.se -v 7
 *   doca_rdma_sync_event --role requester -d mlx5_0 -ld req.desc -re resp.desc -se resp.se -v 7
 *
 * Responder: once connected, waits for the value to reach V, checks it is exactly V, sets V + 1,
 * then waits for the all-ones value that marks completion. It waits by progressing its engine and
 * reading the event (DOCA's sample waits on the CPU without progressing, as a NIC applies the
 * peer's update alone; over zcstore the owner's progress engine applies it). Requester: remote
 * notify_set V; remote get until the value is above V; remote notify_add of what makes it all ones,
 * whose fetched value must be V + 1. Descriptors go through files, as DOCA's samples copy them out
 * of band. Exit status: 0 when every step happened with the exact values.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_mmap.h>
#include <doca_pe.h>
#include <doca_rdma.h>
#include <doca_sync_event.h>

#include "example_common.h"

DOCA_LOG_REGISTER(RDMA_SYNC_EVENT);

#define PEER_WAIT_SECONDS 30
#define RUN_SECONDS 60
#define COMPLETION_VALUE UINT64_MAX

/* The requester's memory: the value it sets, where a get lands, where an add's old value lands. */
enum { WORD_SET, WORD_GET, WORD_FETCHED, WORDS };

struct config {
  bool requester;
  char device[DOCA_DEVINFO_IBDEV_NAME_SIZE];
  const char* local_path;
  const char* remote_path;
  const char* event_path;
  uint64_t value;
};

struct resources {
  struct config cfg;
  struct doca_dev* dev;
  struct doca_pe* pe;
  struct doca_rdma* rdma;
  struct doca_ctx* ctx;
  /* responder */
  struct doca_sync_event* event;
  /* requester */
  struct doca_sync_event_remote_net* remote_event;
  struct doca_mmap* mmap;
  struct doca_buf_inventory* inventory;
  struct doca_buf* bufs[WORDS];
  uint64_t* memory;
  uint64_t gets; /* remote gets until the responder answered */
  bool running;
  bool finished;
  doca_error_t result; /* first error */
  bool done;           /* the context went back to idle */
};

static void fail(struct resources* res, doca_error_t err) {
  if (res->result == DOCA_SUCCESS) res->result = err;
  enum doca_ctx_states state;
  if (doca_ctx_get_state(res->ctx, &state) == DOCA_SUCCESS && state != DOCA_CTX_STATE_IDLE)
    (void)doca_ctx_stop(res->ctx);
}

/* ---- requester: set, get until answered, add; each step submitted from the previous one's
 * completion callback. */

static doca_error_t submit_get(struct resources* res);

static void set_completed(struct doca_rdma_task_remote_net_sync_event_notify_set* task,
                          union doca_data task_user_data, union doca_data ctx_user_data) {
  struct resources* res = ctx_user_data.ptr;
  (void)task_user_data;
  doca_task_free(doca_rdma_task_remote_net_sync_event_notify_set_as_task(task));
  DOCA_LOG_INFO("Set the remote sync event to %llu", (unsigned long long)res->cfg.value);
  doca_error_t result = submit_get(res);
  if (result != DOCA_SUCCESS) fail(res, result);
}

static void set_failed(struct doca_rdma_task_remote_net_sync_event_notify_set* task,
                       union doca_data task_user_data, union doca_data ctx_user_data) {
  struct doca_task* t = doca_rdma_task_remote_net_sync_event_notify_set_as_task(task);
  doca_error_t err = doca_task_get_status(t);
  (void)task_user_data;
  DOCA_LOG_ERR("Remote set failed: %s", doca_error_get_descr(err));
  doca_task_free(t);
  fail(ctx_user_data.ptr, err);
}

static void add_completed(struct doca_rdma_task_remote_net_sync_event_notify_add* task,
                          union doca_data task_user_data, union doca_data ctx_user_data) {
  struct resources* res = ctx_user_data.ptr;
  const uint64_t expected = res->cfg.value + 1;
  (void)task_user_data;
  doca_task_free(doca_rdma_task_remote_net_sync_event_notify_add_as_task(task));
  if (res->memory[WORD_FETCHED] != expected) {
    DOCA_LOG_ERR("The add fetched %llu, expected %llu",
                 (unsigned long long)res->memory[WORD_FETCHED], (unsigned long long)expected);
    fail(res, DOCA_ERROR_UNEXPECTED);
    return;
  }
  DOCA_LOG_INFO("Notified completion (the event held %llu)", (unsigned long long)expected);
  res->finished = true;
  (void)doca_ctx_stop(res->ctx);
}

static void add_failed(struct doca_rdma_task_remote_net_sync_event_notify_add* task,
                       union doca_data task_user_data, union doca_data ctx_user_data) {
  struct doca_task* t = doca_rdma_task_remote_net_sync_event_notify_add_as_task(task);
  doca_error_t err = doca_task_get_status(t);
  (void)task_user_data;
  DOCA_LOG_ERR("Remote add failed: %s", doca_error_get_descr(err));
  doca_task_free(t);
  fail(ctx_user_data.ptr, err);
}

static void get_completed(struct doca_rdma_task_remote_net_sync_event_get* task,
                          union doca_data task_user_data, union doca_data ctx_user_data) {
  struct resources* res = ctx_user_data.ptr;
  struct doca_rdma_task_remote_net_sync_event_notify_add* add = NULL;
  union doca_data user_data = {.u64 = 0};
  doca_error_t result;
  (void)task_user_data;
  doca_task_free(doca_rdma_task_remote_net_sync_event_get_as_task(task));
  res->gets++;
  const uint64_t value = res->memory[WORD_GET];
  if (value <= res->cfg.value) {
    result = submit_get(res); /* the responder has not answered yet */
    if (result != DOCA_SUCCESS) fail(res, result);
    return;
  }
  DOCA_LOG_INFO("The responder answered %llu", (unsigned long long)value);
  result = doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
      res->rdma, NULL, res->remote_event, res->bufs[WORD_FETCHED], COMPLETION_VALUE - value,
      user_data, &add);
  if (result == DOCA_SUCCESS)
    result = doca_task_submit(doca_rdma_task_remote_net_sync_event_notify_add_as_task(add));
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to submit the remote add: %s", doca_error_get_descr(result));
    fail(res, result);
  }
}

static void get_failed(struct doca_rdma_task_remote_net_sync_event_get* task,
                       union doca_data task_user_data, union doca_data ctx_user_data) {
  struct doca_task* t = doca_rdma_task_remote_net_sync_event_get_as_task(task);
  doca_error_t err = doca_task_get_status(t);
  (void)task_user_data;
  DOCA_LOG_ERR("Remote get failed: %s", doca_error_get_descr(err));
  doca_task_free(t);
  fail(ctx_user_data.ptr, err);
}

static doca_error_t submit_get(struct resources* res) {
  struct doca_rdma_task_remote_net_sync_event_get* get = NULL;
  union doca_data user_data = {.u64 = 0};
  /* A get appends the value after the buffer's data: start each one from an empty buffer. */
  doca_error_t result = doca_buf_reset_data_len(res->bufs[WORD_GET]);
  if (result == DOCA_SUCCESS)
    result = doca_rdma_task_remote_net_sync_event_get_allocate_init(
        res->rdma, NULL, res->remote_event, res->bufs[WORD_GET], user_data, &get);
  if (result == DOCA_SUCCESS)
    result = doca_task_submit(doca_rdma_task_remote_net_sync_event_get_as_task(get));
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to submit the remote get: %s", doca_error_get_descr(result));
  return result;
}

/* RUNNING, requester: import the responder's event and set it. */
static doca_error_t start_requests(struct resources* res) {
  void* desc = NULL;
  size_t desc_len = 0;
  struct doca_rdma_task_remote_net_sync_event_notify_set* set = NULL;
  union doca_data user_data = {.u64 = 0};
  doca_error_t result =
      example_read_peer_file(res->cfg.event_path, PEER_WAIT_SECONDS, &desc, &desc_len);
  if (result != DOCA_SUCCESS) return result;
  result =
      doca_sync_event_remote_net_create_from_export(res->dev, desc, desc_len, &res->remote_event);
  free(desc);
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to import the responder's sync event: %s", doca_error_get_descr(result));
    return result;
  }
  res->memory[WORD_SET] = res->cfg.value;
  result = doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
      res->rdma, NULL, res->remote_event, res->bufs[WORD_SET], user_data, &set);
  if (result == DOCA_SUCCESS)
    result = doca_task_submit(doca_rdma_task_remote_net_sync_event_notify_set_as_task(set));
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to submit the remote set: %s", doca_error_get_descr(result));
  return result;
}

/* STARTING: (responder) export the sync event; export the connection, connect to the peer's. */
static doca_error_t export_and_connect(struct resources* res) {
  const void* desc = NULL;
  size_t len = 0;
  void* remote_desc = NULL;
  size_t remote_len = 0;
  struct doca_rdma_connection* connection = NULL;
  doca_error_t result;
  if (!res->cfg.requester) {
    const uint8_t* event_desc = NULL;
    size_t event_len = 0;
    result = doca_sync_event_export_to_remote_net(res->event, &event_desc, &event_len);
    if (result == DOCA_SUCCESS)
      result = example_write_file(res->cfg.event_path, event_desc, event_len);
    if (result != DOCA_SUCCESS) {
      DOCA_LOG_ERR("Failed to export the sync event: %s", doca_error_get_descr(result));
      return result;
    }
  }
  result = doca_rdma_export(res->rdma, &desc, &len, &connection);
  if (result == DOCA_SUCCESS) result = example_write_file(res->cfg.local_path, desc, len);
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to export the RDMA connection: %s", doca_error_get_descr(result));
    return result;
  }
  result =
      example_read_peer_file(res->cfg.remote_path, PEER_WAIT_SECONDS, &remote_desc, &remote_len);
  if (result != DOCA_SUCCESS) return result;
  result = doca_rdma_connect(res->rdma, remote_desc, remote_len, connection);
  free(remote_desc);
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to connect to the peer: %s", doca_error_get_descr(result));
  return result;
}

static void state_changed(const union doca_data user_data, struct doca_ctx* ctx,
                          enum doca_ctx_states prev_state, enum doca_ctx_states next_state) {
  struct resources* res = user_data.ptr;
  doca_error_t result = DOCA_SUCCESS;
  (void)ctx;
  (void)prev_state;
  switch (next_state) {
    case DOCA_CTX_STATE_STARTING:
      DOCA_LOG_INFO("RDMA context is starting");
      result = export_and_connect(res);
      break;
    case DOCA_CTX_STATE_RUNNING:
      DOCA_LOG_INFO("RDMA context is running");
      res->running = true;
      if (res->cfg.requester) result = start_requests(res);
      break;
    case DOCA_CTX_STATE_STOPPING:
      DOCA_LOG_INFO("RDMA context is stopping");
      break;
    case DOCA_CTX_STATE_IDLE:
      DOCA_LOG_INFO("RDMA context is idle");
      res->running = false;
      res->done = true;
      break;
  }
  if (result != DOCA_SUCCESS) fail(res, result);
}

/* ---- responder: the CPU side of the event, from the main loop once connected. */

/* Progresses the engine until the event's value is above `floor`, or RUN_SECONDS pass. DOCA's
 * sample waits on the CPU (doca_sync_event_wait_gt) without progressing, as a NIC applies the
 * peer's update alone; over zcstore the update lands when this engine is progressed, so the
 * responder keeps progressing while it waits. False on timeout. */
static bool progress_until_above(struct resources* res, uint64_t floor, uint64_t* value) {
  const double deadline = example_now_seconds() + RUN_SECONDS;
  for (;;) {
    if (doca_sync_event_get(res->event, value) == DOCA_SUCCESS && *value > floor) return true;
    if (res->result != DOCA_SUCCESS || example_now_seconds() > deadline) return false;
    if (doca_pe_progress(res->pe) == 0) example_pause_briefly();
  }
}

static void serve_event(struct resources* res) {
  uint64_t value = 0;
  DOCA_LOG_INFO("Waiting for the requester to set the sync event");
  if (!progress_until_above(res, res->cfg.value - 1, &value)) {
    DOCA_LOG_ERR("The requester did not set the sync event");
    fail(res, DOCA_ERROR_TIME_OUT);
    return;
  }
  if (value != res->cfg.value) {
    DOCA_LOG_ERR("Sync event holds %llu, expected %llu", (unsigned long long)value,
                 (unsigned long long)res->cfg.value);
    fail(res, DOCA_ERROR_UNEXPECTED);
    return;
  }
  DOCA_LOG_INFO("Sync event set by the requester: %llu", (unsigned long long)value);
  (void)doca_sync_event_update_set(res->event, res->cfg.value + 1);
  DOCA_LOG_INFO("Waiting for the requester to notify completion");
  if (!progress_until_above(res, COMPLETION_VALUE - 1, &value)) {
    DOCA_LOG_ERR("The requester did not notify completion");
    fail(res, DOCA_ERROR_TIME_OUT);
    return;
  }
  DOCA_LOG_INFO("Completion notified by the requester");
  res->finished = true;
  (void)doca_ctx_stop(res->ctx);
}

static doca_error_t open_device(struct resources* res) {
  struct doca_devinfo** list = NULL;
  uint32_t n = 0;
  doca_error_t result = doca_devinfo_create_list(&list, &n);
  if (result != DOCA_SUCCESS) return result;
  result = DOCA_ERROR_NOT_FOUND;
  for (uint32_t i = 0; i < n; i++) {
    char name[DOCA_DEVINFO_IBDEV_NAME_SIZE] = {0};
    if (doca_devinfo_get_ibdev_name(list[i], name, sizeof(name)) != DOCA_SUCCESS) continue;
    if (strcmp(name, res->cfg.device) != 0) continue;
    if (res->cfg.requester
            ? doca_rdma_cap_task_remote_net_sync_event_notify_set_is_supported(list[i]) !=
                  DOCA_SUCCESS
            : doca_sync_event_cap_is_export_to_remote_net_supported(list[i]) != DOCA_SUCCESS)
      continue;
    result = doca_dev_open(list[i], &res->dev);
    break;
  }
  doca_devinfo_destroy_list(list);
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("No usable device named %s: %s", res->cfg.device, doca_error_get_descr(result));
  return result;
}

static doca_error_t setup_event(struct resources* res) {
  doca_error_t result;
  if ((result = doca_sync_event_create(&res->event)) != DOCA_SUCCESS ||
      (result = doca_sync_event_add_publisher_location_remote_net(res->event)) != DOCA_SUCCESS ||
      (result = doca_sync_event_add_subscriber_location_cpu(res->event, res->dev)) !=
          DOCA_SUCCESS ||
      (result = doca_sync_event_start(res->event)) != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to set up the sync event: %s", doca_error_get_descr(result));
  return result;
}

static doca_error_t setup_requester_memory(struct resources* res) {
  doca_error_t result;
  res->memory = calloc(WORDS, sizeof(uint64_t));
  if (res->memory == NULL) return DOCA_ERROR_NO_MEMORY;
  if ((result = doca_mmap_create(&res->mmap)) != DOCA_SUCCESS ||
      (result = doca_mmap_set_memrange(res->mmap, res->memory, WORDS * sizeof(uint64_t))) !=
          DOCA_SUCCESS ||
      (result = doca_mmap_set_permissions(res->mmap, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE)) !=
          DOCA_SUCCESS ||
      (result = doca_mmap_add_dev(res->mmap, res->dev)) != DOCA_SUCCESS ||
      (result = doca_mmap_start(res->mmap)) != DOCA_SUCCESS ||
      (result = doca_buf_inventory_create(WORDS, &res->inventory)) != DOCA_SUCCESS ||
      (result = doca_buf_inventory_start(res->inventory)) != DOCA_SUCCESS)
    return result;
  for (int i = 0; i < WORDS && result == DOCA_SUCCESS; i++)
    result = doca_buf_inventory_buf_get_by_addr(res->inventory, res->mmap, &res->memory[i],
                                                sizeof(uint64_t), &res->bufs[i]);
  /* The set sends the data of its buffer: all 8 bytes. */
  if (result == DOCA_SUCCESS)
    result = doca_buf_set_data(res->bufs[WORD_SET], &res->memory[WORD_SET], sizeof(uint64_t));
  return result;
}

static doca_error_t setup(struct resources* res) {
  union doca_data ctx_data = {.ptr = res};
  doca_error_t result = open_device(res);
  if (result != DOCA_SUCCESS) return result;
  result = res->cfg.requester ? setup_requester_memory(res) : setup_event(res);
  if (result != DOCA_SUCCESS) return result;
  if ((result = doca_pe_create(&res->pe)) != DOCA_SUCCESS) return result;
  if ((result = doca_rdma_create(res->dev, &res->rdma)) != DOCA_SUCCESS) return result;
  res->ctx = doca_rdma_as_ctx(res->rdma);
  /* The owner of the event grants the remote get, set and add. */
  const uint32_t access = res->cfg.requester
                              ? DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
                              : DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
                                    DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC;
  if ((result = doca_rdma_set_permissions(res->rdma, access)) != DOCA_SUCCESS ||
      (result = doca_rdma_set_gid_index(res->rdma, 0)) != DOCA_SUCCESS)
    return result;
  if (res->cfg.requester && ((result = doca_rdma_task_remote_net_sync_event_notify_set_set_conf(
                                  res->rdma, set_completed, set_failed, 1)) != DOCA_SUCCESS ||
                             (result = doca_rdma_task_remote_net_sync_event_get_set_conf(
                                  res->rdma, get_completed, get_failed, 1)) != DOCA_SUCCESS ||
                             (result = doca_rdma_task_remote_net_sync_event_notify_add_set_conf(
                                  res->rdma, add_completed, add_failed, 1)) != DOCA_SUCCESS)) {
    DOCA_LOG_ERR("Failed to configure the sync event tasks: %s", doca_error_get_descr(result));
    return result;
  }
  if ((result = doca_pe_connect_ctx(res->pe, res->ctx)) != DOCA_SUCCESS ||
      (result = doca_ctx_set_state_changed_cb(res->ctx, state_changed)) != DOCA_SUCCESS ||
      (result = doca_ctx_set_user_data(res->ctx, ctx_data)) != DOCA_SUCCESS)
    return result;
  return doca_ctx_start(res->ctx);
}

static void teardown(struct resources* res) {
  if (res->rdma != NULL && doca_rdma_destroy(res->rdma) != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to destroy the RDMA context");
  if (res->pe != NULL) (void)doca_pe_destroy(res->pe);
  if (res->event != NULL) {
    (void)doca_sync_event_stop(res->event);
    (void)doca_sync_event_destroy(res->event);
  }
  if (res->remote_event != NULL) (void)doca_sync_event_remote_net_destroy(res->remote_event);
  for (int i = 0; i < WORDS; i++)
    if (res->bufs[i] != NULL) (void)doca_buf_dec_refcount(res->bufs[i], NULL);
  if (res->inventory != NULL) (void)doca_buf_inventory_destroy(res->inventory);
  if (res->mmap != NULL) (void)doca_mmap_destroy(res->mmap);
  if (res->dev != NULL) (void)doca_dev_close(res->dev);
  free(res->memory);
}

static void usage(const char* program) {
  fprintf(stderr,
          "usage: %s --role requester|responder -d DEVICE -ld LOCAL_DESCRIPTOR "
          "-re REMOTE_DESCRIPTOR -se SYNC_EVENT_DESCRIPTOR [-v VALUE]\n",
          program);
}

static bool parse(int argc, char** argv, struct config* cfg) {
  bool have_role = false;
  cfg->value = 1;
  snprintf(cfg->device, sizeof(cfg->device), "mlx5_0");
  for (int i = 1; i + 1 < argc; i += 2) {
    const char* flag = argv[i];
    const char* value = argv[i + 1];
    if (strcmp(flag, "--role") == 0) {
      if (strcmp(value, "requester") != 0 && strcmp(value, "responder") != 0) return false;
      cfg->requester = strcmp(value, "requester") == 0;
      have_role = true;
    } else if (strcmp(flag, "-d") == 0 || strcmp(flag, "--device") == 0) {
      if (strlen(value) >= sizeof(cfg->device)) return false;
      snprintf(cfg->device, sizeof(cfg->device), "%s", value);
    } else if (strcmp(flag, "-ld") == 0 || strcmp(flag, "--local-descriptor-path") == 0) {
      cfg->local_path = value;
    } else if (strcmp(flag, "-re") == 0 || strcmp(flag, "--remote-descriptor-path") == 0) {
      cfg->remote_path = value;
    } else if (strcmp(flag, "-se") == 0 || strcmp(flag, "--sync-event-descriptor-path") == 0) {
      cfg->event_path = value;
    } else if (strcmp(flag, "-v") == 0 || strcmp(flag, "--value") == 0) {
      char* end = NULL;
      unsigned long long v = strtoull(value, &end, 10);
      /* V + 1 must stay below the completion value, and the responder waits for > V - 1. */
      if (end == value || *end != '\0' || v == 0 || v >= COMPLETION_VALUE - 1) return false;
      cfg->value = v;
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && have_role && cfg->local_path != NULL && cfg->remote_path != NULL &&
         cfg->event_path != NULL;
}

int main(int argc, char** argv) {
  struct resources res;
  memset(&res, 0, sizeof(res));
  if (!parse(argc, argv, &res.cfg)) {
    usage(argv[0]);
    return 2;
  }
  doca_error_t result = doca_log_backend_create_standard();
  if (result == DOCA_SUCCESS) result = setup(&res);
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Setup failed: %s", doca_error_get_name(result));
    if (res.ctx != NULL) (void)doca_ctx_stop(res.ctx);
    teardown(&res);
    return 1;
  }
  const double deadline = example_now_seconds() + RUN_SECONDS;
  while (!res.done) {
    if (example_now_seconds() > deadline) {
      DOCA_LOG_ERR("Timed out");
      fail(&res, DOCA_ERROR_TIME_OUT);
      break;
    }
    if (!res.cfg.requester && res.running && !res.finished && res.result == DOCA_SUCCESS)
      serve_event(&res);
    if (doca_pe_progress(res.pe) == 0) example_pause_briefly();
  }
  for (int i = 0; i < 100000 && !res.done; i++) (void)doca_pe_progress(res.pe);
  if (res.cfg.requester) DOCA_LOG_INFO("Remote gets: %llu", (unsigned long long)res.gets);
  teardown(&res);
  if (res.result == DOCA_SUCCESS && !res.finished) res.result = DOCA_ERROR_UNEXPECTED;
  if (res.result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed: %s", doca_error_get_name(res.result));
    return 1;
  }
  DOCA_LOG_INFO("%s done", res.cfg.requester ? "Requester" : "Responder");
  return 0;
}
