#include "example_common.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <doca_log.h>

DOCA_LOG_REGISTER(EXAMPLE_COMMON);

/* The largest descriptor file accepted: export blobs are a few hundred bytes. */
#define MAX_PEER_FILE_SIZE 65536

double example_now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void example_pause_briefly(void) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = 100000};
  nanosleep(&ts, NULL);
}

doca_error_t example_write_file(const char* path, const void* data, size_t len) {
  char tmp[4096];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
    return DOCA_ERROR_INVALID_VALUE;
  FILE* f = fopen(tmp, "wb");
  if (f == NULL) return DOCA_ERROR_IO_FAILED;
  bool ok = fwrite(data, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok;
  if (!ok || rename(tmp, path) != 0) return DOCA_ERROR_IO_FAILED;
  return DOCA_SUCCESS;
}

doca_error_t example_read_peer_file(const char* path, double wait_seconds, void** data,
                                    size_t* len) {
  const double deadline = example_now_seconds() + wait_seconds;
  struct stat st;
  while (stat(path, &st) != 0) {
    if (example_now_seconds() > deadline) {
      DOCA_LOG_ERR("Timed out waiting for %s", path);
      return DOCA_ERROR_TIME_OUT;
    }
    example_pause_briefly();
  }
  if (st.st_size <= 0 || st.st_size > MAX_PEER_FILE_SIZE) {
    DOCA_LOG_ERR("%s has an unexpected size (%lld bytes)", path, (long long)st.st_size);
    return DOCA_ERROR_INVALID_VALUE;
  }
  FILE* f = fopen(path, "rb");
  if (f == NULL) return DOCA_ERROR_IO_FAILED;
  *data = malloc((size_t)st.st_size);
  if (*data == NULL) {
    fclose(f);
    return DOCA_ERROR_NO_MEMORY;
  }
  *len = fread(*data, 1, (size_t)st.st_size, f);
  fclose(f);
  if (*len != (size_t)st.st_size) {
    free(*data);
    *data = NULL;
    return DOCA_ERROR_IO_FAILED;
  }
  return DOCA_SUCCESS;
}

doca_error_t example_open_device(const char* name,
                                 doca_error_t (*capable)(const struct doca_devinfo*),
                                 struct doca_dev** dev) {
  struct doca_devinfo** list = NULL;
  uint32_t n = 0;
  doca_error_t result = doca_devinfo_create_list(&list, &n);
  if (result != DOCA_SUCCESS) return result;
  result = DOCA_ERROR_NOT_FOUND;
  for (uint32_t i = 0; i < n; i++) {
    char ibdev[DOCA_DEVINFO_IBDEV_NAME_SIZE] = {0};
    if (doca_devinfo_get_ibdev_name(list[i], ibdev, sizeof(ibdev)) != DOCA_SUCCESS) continue;
    if (strcmp(ibdev, name) != 0 || capable(list[i]) != DOCA_SUCCESS) continue;
    result = doca_dev_open(list[i], dev);
    break;
  }
  doca_devinfo_destroy_list(list);
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("No usable device named %s: %s", name, doca_error_get_descr(result));
  return result;
}

void example_fail(struct example_session* session, doca_error_t err) {
  if (session->result == DOCA_SUCCESS) session->result = err;
  enum doca_ctx_states state;
  if (doca_ctx_get_state(session->ctx, &state) == DOCA_SUCCESS && state != DOCA_CTX_STATE_IDLE)
    (void)doca_ctx_stop(session->ctx);
}

doca_error_t example_create_rdma(struct example_session* session, uint32_t permissions) {
  doca_error_t result;
  if ((result = doca_pe_create(&session->pe)) != DOCA_SUCCESS) return result;
  if ((result = doca_rdma_create(session->dev, &session->rdma)) != DOCA_SUCCESS) return result;
  session->ctx = doca_rdma_as_ctx(session->rdma);
  if ((result = doca_rdma_set_permissions(session->rdma, permissions)) != DOCA_SUCCESS)
    return result;
  return doca_rdma_set_gid_index(session->rdma, 0);
}

/* STARTING: what the program exports besides the connection; our connection's descriptor to
 * local_path; the peer's, once it is there, to connect to. */
static doca_error_t export_and_connect(struct example_session* session) {
  const void* desc = NULL;
  size_t len = 0;
  void* remote_desc = NULL;
  size_t remote_len = 0;
  struct doca_rdma_connection* connection = NULL;
  doca_error_t result;
  if (session->export_more != NULL && (result = session->export_more(session)) != DOCA_SUCCESS)
    return result;
  result = doca_rdma_export(session->rdma, &desc, &len, &connection);
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to export the RDMA connection: %s", doca_error_get_descr(result));
    return result;
  }
  result = example_write_file(session->local_path, desc, len);
  if (result != DOCA_SUCCESS) {
    DOCA_LOG_ERR("Failed to write %s", session->local_path);
    return result;
  }
  result = example_read_peer_file(session->remote_path, EXAMPLE_PEER_WAIT_SECONDS, &remote_desc,
                                  &remote_len);
  if (result != DOCA_SUCCESS) return result;
  result = doca_rdma_connect(session->rdma, remote_desc, remote_len, connection);
  free(remote_desc);
  if (result != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to connect to the peer: %s", doca_error_get_descr(result));
  return result;
}

static void state_changed(const union doca_data user_data, struct doca_ctx* ctx,
                          enum doca_ctx_states prev_state, enum doca_ctx_states next_state) {
  struct example_session* session = user_data.ptr;
  doca_error_t result = DOCA_SUCCESS;
  (void)ctx;
  (void)prev_state;
  switch (next_state) {
    case DOCA_CTX_STATE_STARTING:
      DOCA_LOG_INFO("RDMA context is starting");
      result = export_and_connect(session);
      break;
    case DOCA_CTX_STATE_RUNNING:
      DOCA_LOG_INFO("RDMA context is running");
      session->running = true;
      if (session->on_running != NULL) result = session->on_running(session);
      break;
    case DOCA_CTX_STATE_STOPPING:
      DOCA_LOG_INFO("RDMA context is stopping");
      break;
    case DOCA_CTX_STATE_IDLE:
      DOCA_LOG_INFO("RDMA context is idle");
      session->running = false;
      session->done = true;
      break;
  }
  if (result != DOCA_SUCCESS) example_fail(session, result);
}

doca_error_t example_start_rdma(struct example_session* session) {
  union doca_data ctx_data = {.ptr = session};
  doca_error_t result;
  if ((result = doca_pe_connect_ctx(session->pe, session->ctx)) != DOCA_SUCCESS ||
      (result = doca_ctx_set_state_changed_cb(session->ctx, state_changed)) != DOCA_SUCCESS ||
      (result = doca_ctx_set_user_data(session->ctx, ctx_data)) != DOCA_SUCCESS)
    return result;
  return doca_ctx_start(session->ctx);
}

/* Progress calls a context that timed out may still need to get back to idle. */
#define DRAIN_PROGRESS_CALLS 100000

void example_run(struct example_session* session, double seconds,
                 void (*between)(struct example_session* session)) {
  const double deadline = example_now_seconds() + seconds;
  while (!session->done) {
    if (example_now_seconds() > deadline) {
      DOCA_LOG_ERR("Timed out");
      example_fail(session, DOCA_ERROR_TIME_OUT);
      break;
    }
    if (between != NULL) between(session);
    if (doca_pe_progress(session->pe) == 0) example_pause_briefly();
  }
  for (int i = 0; i < DRAIN_PROGRESS_CALLS && !session->done; i++)
    (void)doca_pe_progress(session->pe);
}

void example_destroy_rdma(struct example_session* session) {
  if (session->rdma != NULL && doca_rdma_destroy(session->rdma) != DOCA_SUCCESS)
    DOCA_LOG_ERR("Failed to destroy the RDMA context");
  if (session->pe != NULL) (void)doca_pe_destroy(session->pe);
}
