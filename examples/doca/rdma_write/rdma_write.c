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
#define RUN_SECONDS 60

struct config {
  bool requester;
  char device[DOCA_DEVINFO_IBDEV_NAME_SIZE];
  const char* local_path;
  const char* remote_path;
  const char* mmap_path;
  const char* string;
};

/* Begins with the session: the context's user data is both (example_common.h). */
struct resources {
  struct example_session session;
  struct config cfg;
  struct doca_mmap* mmap;
  struct doca_mmap* remote_mmap;
  struct doca_buf_inventory* inventory;
  char* memory;
  bool finished; /* requester: write completed; responder: memory checked */
};

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
    example_fail(&res->session, result);
  else
    (void)doca_ctx_stop(res->session.ctx);
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
  example_fail(&res->session, err);
}

/* STARTING, responder: export the memory map for the requester to write into. */
static doca_error_t export_mmap(struct example_session* session) {
  struct resources* res = (struct resources*)session;
  const void* desc = NULL;
  size_t len = 0;
  doca_error_t result = doca_mmap_export_rdma(res->mmap, session->dev, &desc, &len);
  if (result == DOCA_SUCCESS) result = example_write_file(res->cfg.mmap_path, desc, len);
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to export the memory map: %s", doca_error_get_descr(result));
  return result;
}

/* RUNNING, requester: map the responder's memory and write the string at its start. */
static doca_error_t write_string(struct example_session* session) {
  struct resources* res = (struct resources*)session;
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
      example_read_peer_file(res->cfg.mmap_path, EXAMPLE_PEER_WAIT_SECONDS, &desc, &desc_len);
  if (result != DOCA_SUCCESS) return result;
  result = doca_mmap_create_from_export(NULL, desc, desc_len, res->session.dev, &res->remote_mmap);
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
    result =
        doca_rdma_task_write_allocate_init(res->session.rdma, NULL, src, dst, user_data, &task);
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
    example_fail(&res->session, DOCA_ERROR_UNEXPECTED);
    return;
  }
  for (size_t i = len; i < MEMORY_SIZE; i++) {
    if (res->memory[i] != 0) {
      DOCA_LOG_ERR("Byte %zu beyond the string was written", i);
      example_fail(&res->session, DOCA_ERROR_UNEXPECTED);
      return;
    }
  }
  DOCA_LOG_INFO("Responder memory holds: %.*s", (int)len, res->memory);
  (void)doca_ctx_stop(res->session.ctx);
}

static doca_error_t setup(struct resources* res) {
  const uint32_t access = res->cfg.requester
                              ? DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
                              : DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE;
  doca_error_t result = example_open_device(res->cfg.device, doca_rdma_cap_task_write_is_supported,
                                            &res->session.dev);
  if (result != DOCA_SUCCESS) return result;
  res->memory = calloc(1, MEMORY_SIZE);
  if (res->memory == NULL) return DOCA_ERROR_NO_MEMORY;
  if ((result = doca_mmap_create(&res->mmap)) != DOCA_SUCCESS ||
      (result = doca_mmap_set_memrange(res->mmap, res->memory, MEMORY_SIZE)) != DOCA_SUCCESS ||
      (result = doca_mmap_set_permissions(res->mmap, access)) != DOCA_SUCCESS ||
      (result = doca_mmap_add_dev(res->mmap, res->session.dev)) != DOCA_SUCCESS ||
      (result = doca_mmap_start(res->mmap)) != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to set up the memory map: %s", doca_error_get_descr(result));
    return result;
  }
  if ((result = doca_buf_inventory_create(2, &res->inventory)) != DOCA_SUCCESS ||
      (result = doca_buf_inventory_start(res->inventory)) != DOCA_SUCCESS)
    return result;
  if ((result = example_create_rdma(&res->session, access)) != DOCA_SUCCESS) return result;
  if (res->cfg.requester &&
      (result = doca_rdma_task_write_set_conf(res->session.rdma, write_completed, write_failed,
                                              1)) != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to configure the write task: %s", doca_error_get_descr(result));
    return result;
  }
  res->session.local_path = res->cfg.local_path;
  res->session.remote_path = res->cfg.remote_path;
  res->session.export_more = res->cfg.requester ? NULL : export_mmap;
  res->session.on_running = res->cfg.requester ? write_string : NULL;
  return example_start_rdma(&res->session);
}

static void teardown(struct resources* res) {
  example_destroy_rdma(&res->session);
  if (res->inventory != NULL) (void)doca_buf_inventory_destroy(res->inventory);
  if (res->remote_mmap != NULL) (void)doca_mmap_destroy(res->remote_mmap);
  if (res->mmap != NULL) (void)doca_mmap_destroy(res->mmap);
  if (res->session.dev != NULL) (void)doca_dev_close(res->session.dev);
  free(res->memory);
}

/* Responder: whether the requester wrote "<re>.done". */
static bool peer_is_done(const struct resources* res) {
  char peer_done[4096];
  struct stat st;
  done_path(res->cfg.remote_path, peer_done, sizeof(peer_done));
  return stat(peer_done, &st) == 0;
}

/* Responder, between progress calls: checks the memory once the requester is done. */
static void check_when_peer_is_done(struct example_session* session) {
  struct resources* res = (struct resources*)session;
  if (session->running && !res->finished && peer_is_done(res)) check_memory(res);
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
    if (res.session.ctx != NULL) (void)doca_ctx_stop(res.session.ctx);
    teardown(&res);
    return 1;
  }
  example_run(&res.session, RUN_SECONDS, res.cfg.requester ? NULL : check_when_peer_is_done);
  /* The requester may have stopped (and so stopped us) right after saying it was done. */
  if (!res.cfg.requester && !res.finished && res.session.result == DOCA_SUCCESS &&
      peer_is_done(&res))
    check_memory(&res);
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
