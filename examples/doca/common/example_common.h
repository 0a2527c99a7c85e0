/*
 * What the DOCA examples share, as DOCA's own samples share samples/common.c: the descriptor
 * files through which two processes exchange their export blobs out of band, and a clock.
 */
#ifndef ZCSTORE_DOCA_EXAMPLE_COMMON_H_
#define ZCSTORE_DOCA_EXAMPLE_COMMON_H_

#include <stddef.h>

#include <doca_error.h>

/* Seconds on the monotonic clock. */
double example_now_seconds(void);

/* Sleeps 100 us: a bounded wait's step. */
void example_pause_briefly(void);

/* Writes the whole file at once (a temporary file renamed), so the peer never reads half. */
doca_error_t example_write_file(const char* path, const void* data, size_t len);

/*
 * Waits up to `wait_seconds` for the peer's file, then reads it (1 byte to 64 KiB) into a buffer
 * from malloc that the caller frees.
 */
doca_error_t example_read_peer_file(const char* path, double wait_seconds, void** data,
                                    size_t* len);

#endif /* ZCSTORE_DOCA_EXAMPLE_COMMON_H_ */
