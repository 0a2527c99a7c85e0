#include "example_common.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
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
