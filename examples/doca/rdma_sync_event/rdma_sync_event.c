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

/* Begins with the session: the context's user data is both (example_common.h). */
struct resources {
  struct example_session session;
  struct config cfg;
  /* responder */
  struct doca_sync_event* event;
  /* requester */
  struct doca_sync_event_remote_net* remote_event;
  struct doca_mmap* mmap;
  struct doca_buf_inventory* inventory;
  struct doca_buf* bufs[WORDS];
  uint64_t* memory;
  uint64_t gets; /* remote gets until the responder answered */
  bool finished;
};

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
  if (result != DOCA_SUCCESS) example_fail(&res->session, result);
}

static void set_failed(struct doca_rdma_task_remote_net_sync_event_notify_set* task,
                       union doca_data task_user_data, union doca_data ctx_user_data) {
  struct doca_task* t = doca_rdma_task_remote_net_sync_event_notify_set_as_task(task);
  doca_error_t err = doca_task_get_status(t);
  (void)task_user_data;
  DOCA_LOG_ERR("Remote set failed: %s", doca_error_get_descr(err));
  doca_task_free(t);
  example_fail(ctx_user_data.ptr, err);
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
    example_fail(&res->session, DOCA_ERROR_UNEXPECTED);
    return;
  }
  DOCA_LOG_INFO("Notified completion (the event held %llu)", (unsigned long long)expected);
  res->finished = true;
  (void)doca_ctx_stop(res->session.ctx);
}

static void add_failed(struct doca_rdma_task_remote_net_sync_event_notify_add* task,
                       union doca_data task_user_data, union doca_data ctx_user_data) {
  struct doca_task* t = doca_rdma_task_remote_net_sync_event_notify_add_as_task(task);
  doca_error_t err = doca_task_get_status(t);
  (void)task_user_data;
  DOCA_LOG_ERR("Remote add failed: %s", doca_error_get_descr(err));
  doca_task_free(t);
  example_fail(ctx_user_data.ptr, err);
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
    if (result != DOCA_SUCCESS) example_fail(&res->session, result);
    return;
  }
  DOCA_LOG_INFO("The responder answered %llu", (unsigned long long)value);
  result = doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
      res->session.rdma, NULL, res->remote_event, res->bufs[WORD_FETCHED], COMPLETION_VALUE - value,
      user_data, &add);
  if (result == DOCA_SUCCESS)
    result = doca_task_submit(doca_rdma_task_remote_net_sync_event_notify_add_as_task(add));
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to submit the remote add: %s", doca_error_get_descr(result));
    example_fail(&res->session, result);
  }
}

static void get_failed(struct doca_rdma_task_remote_net_sync_event_get* task,
                       union doca_data task_user_data, union doca_data ctx_user_data) {
  struct doca_task* t = doca_rdma_task_remote_net_sync_event_get_as_task(task);
  doca_error_t err = doca_task_get_status(t);
  (void)task_user_data;
  DOCA_LOG_ERR("Remote get failed: %s", doca_error_get_descr(err));
  doca_task_free(t);
  example_fail(ctx_user_data.ptr, err);
}

static doca_error_t submit_get(struct resources* res) {
  struct doca_rdma_task_remote_net_sync_event_get* get = NULL;
  union doca_data user_data = {.u64 = 0};
  /* A get appends the value after the buffer's data: start each one from an empty buffer. */
  doca_error_t result = doca_buf_reset_data_len(res->bufs[WORD_GET]);
  if (result == DOCA_SUCCESS)
    result = doca_rdma_task_remote_net_sync_event_get_allocate_init(
        res->session.rdma, NULL, res->remote_event, res->bufs[WORD_GET], user_data, &get);
  if (result == DOCA_SUCCESS)
    result = doca_task_submit(doca_rdma_task_remote_net_sync_event_get_as_task(get));
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to submit the remote get: %s", doca_error_get_descr(result));
  return result;
}

/* RUNNING, requester: import the responder's event and set it. */
static doca_error_t start_requests(struct example_session* session) {
  struct resources* res = (struct resources*)session;
  void* desc = NULL;
  size_t desc_len = 0;
  struct doca_rdma_task_remote_net_sync_event_notify_set* set = NULL;
  union doca_data user_data = {.u64 = 0};
  doca_error_t result =
      example_read_peer_file(res->cfg.event_path, EXAMPLE_PEER_WAIT_SECONDS, &desc, &desc_len);
  if (result != DOCA_SUCCESS) return result;
  result = doca_sync_event_remote_net_create_from_export(res->session.dev, desc, desc_len,
                                                         &res->remote_event);
  free(desc);
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to import the responder's sync event: %s", doca_error_get_descr(result));
    return result;
  }
  res->memory[WORD_SET] = res->cfg.value;
  result = doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
      res->session.rdma, NULL, res->remote_event, res->bufs[WORD_SET], user_data, &set);
  if (result == DOCA_SUCCESS)
    result = doca_task_submit(doca_rdma_task_remote_net_sync_event_notify_set_as_task(set));
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to submit the remote set: %s", doca_error_get_descr(result));
  return result;
}

/* STARTING, responder: export the sync event for the requester to import. */
static doca_error_t export_event(struct example_session* session) {
  struct resources* res = (struct resources*)session;
  const uint8_t* desc = NULL;
  size_t len = 0;
  doca_error_t result = doca_sync_event_export_to_remote_net(res->event, &desc, &len);
  if (result == DOCA_SUCCESS) result = example_write_file(res->cfg.event_path, desc, len);
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to export the sync event: %s", doca_error_get_descr(result));
  return result;
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
    if (res->session.result != DOCA_SUCCESS || example_now_seconds() > deadline) return false;
    if (doca_pe_progress(res->session.pe) == 0) example_pause_briefly();
  }
}

static void serve_event(struct resources* res) {
  uint64_t value = 0;
  DOCA_LOG_INFO("Waiting for the requester to set the sync event");
  if (!progress_until_above(res, res->cfg.value - 1, &value)) {
    DOCA_LOG_ERR("The requester did not set the sync event");
    example_fail(&res->session, DOCA_ERROR_TIME_OUT);
    return;
  }
  if (value != res->cfg.value) {
    DOCA_LOG_ERR("Sync event holds %llu, expected %llu", (unsigned long long)value,
                 (unsigned long long)res->cfg.value);
    example_fail(&res->session, DOCA_ERROR_UNEXPECTED);
    return;
  }
  DOCA_LOG_INFO("Sync event set by the requester: %llu", (unsigned long long)value);
  (void)doca_sync_event_update_set(res->event, res->cfg.value + 1);
  DOCA_LOG_INFO("Waiting for the requester to notify completion");
  if (!progress_until_above(res, COMPLETION_VALUE - 1, &value)) {
    DOCA_LOG_ERR("The requester did not notify completion");
    example_fail(&res->session, DOCA_ERROR_TIME_OUT);
    return;
  }
  DOCA_LOG_INFO("Completion notified by the requester");
  res->finished = true;
  (void)doca_ctx_stop(res->session.ctx);
}

/* Responder, between progress calls: serves the event once connected. */
static void serve_when_running(struct example_session* session) {
  struct resources* res = (struct resources*)session;
  if (session->running && !res->finished && session->result == DOCA_SUCCESS) serve_event(res);
}

static doca_error_t setup_event(struct resources* res) {
  doca_error_t result;
  if ((result = doca_sync_event_create(&res->event)) != DOCA_SUCCESS ||
      (result = doca_sync_event_add_publisher_location_remote_net(res->event)) != DOCA_SUCCESS ||
      (result = doca_sync_event_add_subscriber_location_cpu(res->event, res->session.dev)) !=
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
      (result = doca_mmap_add_dev(res->mmap, res->session.dev)) != DOCA_SUCCESS ||
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
  doca_error_t result = example_open_device(
      res->cfg.device,
      res->cfg.requester ? doca_rdma_cap_task_remote_net_sync_event_notify_set_is_supported
                         : doca_sync_event_cap_is_export_to_remote_net_supported,
      &res->session.dev);
  if (result != DOCA_SUCCESS) return result;
  result = res->cfg.requester ? setup_requester_memory(res) : setup_event(res);
  if (result != DOCA_SUCCESS) return result;
  /* The owner of the event grants the remote get, set and add. */
  const uint32_t access = res->cfg.requester
                              ? DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
                              : DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ |
                                    DOCA_ACCESS_FLAG_RDMA_WRITE | DOCA_ACCESS_FLAG_RDMA_ATOMIC;
  if ((result = example_create_rdma(&res->session, access)) != DOCA_SUCCESS) return result;
  if (res->cfg.requester &&
      ((result = doca_rdma_task_remote_net_sync_event_notify_set_set_conf(
            res->session.rdma, set_completed, set_failed, 1)) != DOCA_SUCCESS ||
       (result = doca_rdma_task_remote_net_sync_event_get_set_conf(
            res->session.rdma, get_completed, get_failed, 1)) != DOCA_SUCCESS ||
       (result = doca_rdma_task_remote_net_sync_event_notify_add_set_conf(
            res->session.rdma, add_completed, add_failed, 1)) != DOCA_SUCCESS)) {
    DOCA_LOG_ERR("Failed to configure the sync event tasks: %s", doca_error_get_descr(result));
    return result;
  }
  res->session.local_path = res->cfg.local_path;
  res->session.remote_path = res->cfg.remote_path;
  res->session.export_more = res->cfg.requester ? NULL : export_event;
  res->session.on_running = res->cfg.requester ? start_requests : NULL;
  return example_start_rdma(&res->session);
}

static void teardown(struct resources* res) {
  example_destroy_rdma(&res->session);
  if (res->event != NULL) {
    (void)doca_sync_event_stop(res->event);
    (void)doca_sync_event_destroy(res->event);
  }
  if (res->remote_event != NULL) (void)doca_sync_event_remote_net_destroy(res->remote_event);
  for (int i = 0; i < WORDS; i++)
    if (res->bufs[i] != NULL) (void)doca_buf_dec_refcount(res->bufs[i], NULL);
  if (res->inventory != NULL) (void)doca_buf_inventory_destroy(res->inventory);
  if (res->mmap != NULL) (void)doca_mmap_destroy(res->mmap);
  if (res->session.dev != NULL) (void)doca_dev_close(res->session.dev);
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
    if (res.session.ctx != NULL) (void)doca_ctx_stop(res.session.ctx);
    teardown(&res);
    return 1;
  }
  example_run(&res.session, RUN_SECONDS, res.cfg.requester ? NULL : serve_when_running);
  if (res.cfg.requester) DOCA_LOG_INFO("Remote gets: %llu", (unsigned long long)res.gets);
  teardown(&res);
  if (res.session.result == DOCA_SUCCESS && !res.finished)
    res.session.result = DOCA_ERROR_UNEXPECTED;
  if (res.session.result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed: %s", doca_error_get_name(res.session.result));
    return 1;
  }
  DOCA_LOG_INFO("%s done", res.cfg.requester ? "Requester" : "Responder");
  return 0;
}
