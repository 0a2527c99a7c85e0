/*
 * RDMA write between two processes, written against the DOCA API only (seed 003's write
 * requester/responder): the responder exports a memory map with RDMA write permission, the
 * requester writes a string into it with one write task, and the responder checks its memory.
 *
 *   doca_rdma_write --role responder -d mlx5_0 -ld resp.desc -re req.desc -m resp.mmap -w "Hi"
 *   doca_rdma_write --role requester -d mlx5_0 -ld req.desc -re resp.desc -m resp.mmap -w "Hi"
 *
 * Descriptors go through files, as DOCA's samples copy them out of band. The requester writes
 * "<ld>.done" once its write completed; the responder, which keeps progressing meanwhile (its
 * side serves the write), then checks that its memory holds exactly the string.
 * Exit status: 0 when the write completed (requester) or the memory holds it (responder).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_mmap.h>
#include <doca_pe.h>
#include <doca_rdma.h>

#include "example_common.h"

DOCA_LOG_REGISTER(RDMA_WRITE);

#define MEMORY_SIZE 4096
#define PEER_WAIT_SECONDS 30
#define RUN_SECONDS 60

struct config {
  bool requester;
  char device[DOCA_DEVINFO_IBDEV_NAME_SIZE];
  const char* local_path;
  const char* remote_path;
  const char* mmap_path;
  const char* string;
};

struct resources {
  struct config cfg;
  struct doca_dev* dev;
  struct doca_mmap* mmap;
  struct doca_mmap* remote_mmap;
  struct doca_buf_inventory* inventory;
  struct doca_pe* pe;
  struct doca_rdma* rdma;
  struct doca_ctx* ctx;
  char* memory;
  bool running;
  bool finished;       /* requester: write completed; responder: memory checked */
  doca_error_t result; /* first error */
  bool done;           /* the context went back to idle */
};

static void fail(struct resources* res, doca_error_t err) {
  if (res->result == DOCA_SUCCESS) res->result = err;
  enum doca_ctx_states state;
  if (doca_ctx_get_state(res->ctx, &state) == DOCA_SUCCESS && state != DOCA_CTX_STATE_IDLE)
    (void)doca_ctx_stop(res->ctx);
}

static void done_path(const char* base, char* out, size_t size) {
  snprintf(out, size, "%s.done", base);
}

static void write_completed(struct doca_rdma_task_write* task, union doca_data task_user_data,
                            union doca_data ctx_user_data) {
  struct resources* res = ctx_user_data.ptr;
  struct doca_buf* src = (struct doca_buf*)doca_rdma_task_write_get_src_buf(task);
  struct doca_buf* dst = doca_rdma_task_write_get_dst_buf(task);
  char done[4096];
  (void)task_user_data;
  DOCA_LOG_INFO("Write completed: \"%s\"", res->cfg.string);
  doca_task_free(doca_rdma_task_write_as_task(task));
  (void)doca_buf_dec_refcount(src, NULL);
  (void)doca_buf_dec_refcount(dst, NULL);
  res->finished = true;
  done_path(res->cfg.local_path, done, sizeof(done));
  doca_error_t result = example_write_file(done, "done\n", 5);
  if (result != DOCA_SUCCESS)
    fail(res, result);
  else
    (void)doca_ctx_stop(res->ctx);
}

static void write_failed(struct doca_rdma_task_write* task, union doca_data task_user_data,
                         union doca_data ctx_user_data) {
  struct resources* res = ctx_user_data.ptr;
  struct doca_buf* src = (struct doca_buf*)doca_rdma_task_write_get_src_buf(task);
  struct doca_buf* dst = doca_rdma_task_write_get_dst_buf(task);
  doca_error_t err = doca_task_get_status(doca_rdma_task_write_as_task(task));
  (void)task_user_data;
  DOCA_LOG_ERR("Write task failed: %s", doca_error_get_descr(err));
  doca_task_free(doca_rdma_task_write_as_task(task));
  (void)doca_buf_dec_refcount(src, NULL);
  (void)doca_buf_dec_refcount(dst, NULL);
  fail(res, err);
}

/* STARTING: (responder) export the memory map; export the connection, connect to the peer's. */
static doca_error_t export_and_connect(struct resources* res) {
  const void* desc = NULL;
  size_t len = 0;
  void* remote_desc = NULL;
  size_t remote_len = 0;
  struct doca_rdma_connection* connection = NULL;
  doca_error_t result;
  if (!res->cfg.requester) {
    result = doca_mmap_export_rdma(res->mmap, res->dev, &desc, &len);
    if (result == DOCA_SUCCESS) result = example_write_file(res->cfg.mmap_path, desc, len);
    if (result != DOCA_SUCCESS) {
      DOCA_LOG_ERR("Failed to export the memory map: %s", doca_error_get_descr(result));
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

/* RUNNING, requester: map the responder's memory and write the string at its start. */
static doca_error_t write_string(struct resources* res) {
  void* desc = NULL;
  size_t desc_len = 0;
  void* remote_addr = NULL;
  size_t remote_len = 0;
  struct doca_buf* src = NULL;
  struct doca_buf* dst = NULL;
  struct doca_rdma_task_write* task = NULL;
  union doca_data user_data = {.u64 = 0};
  const size_t len = strlen(res->cfg.string);
  doca_error_t result =
      example_read_peer_file(res->cfg.mmap_path, PEER_WAIT_SECONDS, &desc, &desc_len);
  if (result != DOCA_SUCCESS) return result;
  result = doca_mmap_create_from_export(NULL, desc, desc_len, res->dev, &res->remote_mmap);
  free(desc);
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to map the responder's memory: %s", doca_error_get_descr(result));
    return result;
  }
  result = doca_mmap_get_memrange(res->remote_mmap, &remote_addr, &remote_len);
  if (result != DOCA_SUCCESS) return result;
  if (remote_len < len) {
    DOCA_LOG_ERR("The responder's memory (%zu bytes) is too small", remote_len);
    return DOCA_ERROR_TOO_BIG;
  }
  memcpy(res->memory, res->cfg.string, len);
  result = doca_buf_inventory_buf_get_by_data(res->inventory, res->mmap, res->memory, len, &src);
  if (result != DOCA_SUCCESS) return result;
  result = doca_buf_inventory_buf_get_by_addr(res->inventory, res->remote_mmap, remote_addr,
                                              remote_len, &dst);
  if (result == DOCA_SUCCESS)
    result = doca_rdma_task_write_allocate_init(res->rdma, NULL, src, dst, user_data, &task);
  if (result == DOCA_SUCCESS) result = doca_task_submit(doca_rdma_task_write_as_task(task));
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to submit the write: %s", doca_error_get_descr(result));
    if (task != NULL) doca_task_free(doca_rdma_task_write_as_task(task));
    if (dst != NULL) (void)doca_buf_dec_refcount(dst, NULL);
    (void)doca_buf_dec_refcount(src, NULL);
  }
  return result;
}

/* Responder, from the main loop once the requester says it is done: is the string there? */
static void check_memory(struct resources* res) {
  const size_t len = strlen(res->cfg.string);
  res->finished = true;
  if (memcmp(res->memory, res->cfg.string, len) != 0) {
    DOCA_LOG_ERR("Memory holds \"%.*s\", expected \"%s\"", (int)len, res->memory, res->cfg.string);
    fail(res, DOCA_ERROR_UNEXPECTED);
    return;
  }
  for (size_t i = len; i < MEMORY_SIZE; i++) {
    if (res->memory[i] != 0) {
      DOCA_LOG_ERR("Byte %zu beyond the string was written", i);
      fail(res, DOCA_ERROR_UNEXPECTED);
      return;
    }
  }
  DOCA_LOG_INFO("Responder memory holds: %.*s", (int)len, res->memory);
  (void)doca_ctx_stop(res->ctx);
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
      if (res->cfg.requester) result = write_string(res);
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

static doca_error_t open_device(struct resources* res) {
  struct doca_devinfo** list = NULL;
  uint32_t n = 0;
  doca_error_t result = doca_devinfo_create_list(&list, &n);
  if (result != DOCA_SUCCESS) return result;
  result = DOCA_ERROR_NOT_FOUND;
  for (uint32_t i = 0; i < n; i++) {
    char name[DOCA_DEVINFO_IBDEV_NAME_SIZE] = {0};
    if (doca_devinfo_get_ibdev_name(list[i], name, sizeof(name)) != DOCA_SUCCESS) continue;
    if (strcmp(name, res->cfg.device) != 0 ||
        doca_rdma_cap_task_write_is_supported(list[i]) != DOCA_SUCCESS)
      continue;
    result = doca_dev_open(list[i], &res->dev);
    break;
  }
  doca_devinfo_destroy_list(list);
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("No usable device named %s: %s", res->cfg.device, doca_error_get_descr(result));
  return result;
}

static doca_error_t setup(struct resources* res) {
  const uint32_t access = res->cfg.requester
                              ? DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
                              : DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE;
  union doca_data ctx_data = {.ptr = res};
  doca_error_t result = open_device(res);
  if (result != DOCA_SUCCESS) return result;
  res->memory = calloc(1, MEMORY_SIZE);
  if (res->memory == NULL) return DOCA_ERROR_NO_MEMORY;
  if ((result = doca_mmap_create(&res->mmap)) != DOCA_SUCCESS ||
      (result = doca_mmap_set_memrange(res->mmap, res->memory, MEMORY_SIZE)) != DOCA_SUCCESS ||
      (result = doca_mmap_set_permissions(res->mmap, access)) != DOCA_SUCCESS ||
      (result = doca_mmap_add_dev(res->mmap, res->dev)) != DOCA_SUCCESS ||
      (result = doca_mmap_start(res->mmap)) != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to set up the memory map: %s", doca_error_get_descr(result));
    return result;
  }
  if ((result = doca_buf_inventory_create(2, &res->inventory)) != DOCA_SUCCESS ||
      (result = doca_buf_inventory_start(res->inventory)) != DOCA_SUCCESS)
    return result;
  if ((result = doca_pe_create(&res->pe)) != DOCA_SUCCESS) return result;
  if ((result = doca_rdma_create(res->dev, &res->rdma)) != DOCA_SUCCESS) return result;
  res->ctx = doca_rdma_as_ctx(res->rdma);
  if ((result = doca_rdma_set_permissions(res->rdma, access)) != DOCA_SUCCESS ||
      (result = doca_rdma_set_gid_index(res->rdma, 0)) != DOCA_SUCCESS)
    return result;
  if (res->cfg.requester && (result = doca_rdma_task_write_set_conf(
                                 res->rdma, write_completed, write_failed, 1)) != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to configure the write task: %s", doca_error_get_descr(result));
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
  if (res->inventory != NULL) (void)doca_buf_inventory_destroy(res->inventory);
  if (res->remote_mmap != NULL) (void)doca_mmap_destroy(res->remote_mmap);
  if (res->mmap != NULL) (void)doca_mmap_destroy(res->mmap);
  if (res->dev != NULL) (void)doca_dev_close(res->dev);
  free(res->memory);
}

static void usage(const char* program) {
  fprintf(
      stderr,
      "usage: %s --role requester|responder -d DEVICE -ld LOCAL_DESCRIPTOR -re REMOTE_DESCRIPTOR "
      "-m MMAP_DESCRIPTOR [-w STRING]\n",
      program);
}

static bool parse(int argc, char** argv, struct config* cfg) {
  bool have_role = false;
  cfg->string = "Hi DOCA RDMA!";
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
    } else if (strcmp(flag, "-m") == 0 || strcmp(flag, "--mmap-descriptor-path") == 0) {
      cfg->mmap_path = value;
    } else if (strcmp(flag, "-w") == 0 || strcmp(flag, "--write-string") == 0) {
      if (strlen(value) == 0 || strlen(value) >= MEMORY_SIZE) return false;
      cfg->string = value;
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && have_role && cfg->local_path != NULL && cfg->remote_path != NULL &&
         cfg->mmap_path != NULL;
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
  char peer_done[4096];
  done_path(res.cfg.remote_path, peer_done, sizeof(peer_done));
  const double deadline = example_now_seconds() + RUN_SECONDS;
  while (!res.done) {
    if (example_now_seconds() > deadline) {
      DOCA_LOG_ERR("Timed out");
      fail(&res, DOCA_ERROR_TIME_OUT);
      break;
    }
    struct stat st;
    if (!res.cfg.requester && res.running && !res.finished && stat(peer_done, &st) == 0)
      check_memory(&res);
    if (doca_pe_progress(res.pe) == 0) example_pause_briefly();
  }
  for (int i = 0; i < 100000 && !res.done; i++) (void)doca_pe_progress(res.pe);
  /* The requester may have stopped (and so stopped us) right after saying it was done. */
  struct stat st;
  if (!res.cfg.requester && !res.finished && res.result == DOCA_SUCCESS &&
      stat(peer_done, &st) == 0)
    check_memory(&res);
  teardown(&res);
  if (res.result == DOCA_SUCCESS && !res.finished) res.result = DOCA_ERROR_UNEXPECTED;
  if (res.result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed: %s", doca_error_get_name(res.result));
    return 1;
  }
  DOCA_LOG_INFO("%s done", res.cfg.requester ? "Requester" : "Responder");
  return 0;
}
