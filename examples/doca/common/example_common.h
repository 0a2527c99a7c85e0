/*
 * What the DOCA examples share, as DOCA's own samples share samples/common.c: the descriptor
 * files through which two processes exchange their export blobs out of band, a clock, and one
 * RDMA context's life as every example drives it (device, progress engine, state callback,
 * connection exchange, main loop).
 */
#ifndef ZCSTORE_DOCA_EXAMPLE_COMMON_H_
#define ZCSTORE_DOCA_EXAMPLE_COMMON_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_pe.h>
#include <doca_rdma.h>

/* How long a side waits for a file its peer writes (a descriptor, a "ready" or "done" mark). */
#define EXAMPLE_PEER_WAIT_SECONDS 30

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

/*
 * Opens the device named `name` (DOCA_DEVINFO_IBDEV_NAME_SIZE at most) whose `capable` check
 * passes, e.g. doca_rdma_cap_task_send_is_supported; logs and returns NOT_FOUND when none does.
 */
doca_error_t example_open_device(const char* name,
                                 doca_error_t (*capable)(const struct doca_devinfo*),
                                 struct doca_dev** dev);

/*
 * One RDMA context and its progress engine, driven from one thread. A program's resources begin
 * with this struct, so the context's user data (the resources) is the session too: the state
 * callback reads it as one, the program's task callbacks as the other.
 */
struct example_session {
  struct doca_dev* dev;
  struct doca_pe* pe;
  struct doca_rdma* rdma;
  struct doca_ctx* ctx;
  const char* local_path;  /* where this side writes its connection descriptor */
  const char* remote_path; /* where the peer writes its own */
  /* STARTING, before the connection is exported (or NULL): what else the peer imports, such as a
   * memory map or a sync event. */
  doca_error_t (*export_more)(struct example_session* session);
  /* RUNNING (or NULL): the program's first tasks. */
  doca_error_t (*on_running)(struct example_session* session);
  bool running;        /* between RUNNING and IDLE */
  bool done;           /* the context went back to idle */
  doca_error_t result; /* first error */
};

/* Records the first error and stops the context unless it is idle. */
void example_fail(struct example_session* session, doca_error_t err);

/* Makes the progress engine and the RDMA context on session->dev, with these permissions. */
doca_error_t example_create_rdma(struct example_session* session, uint32_t permissions);

/*
 * Connects the context (its task types configured) to the engine, with the state callback and
 * the program's resources (which begin with `session`) as user data, and starts it. The state
 * callback then exports the connection and connects to the peer's on STARTING, and runs
 * on_running on RUNNING; an error fails the session.
 */
doca_error_t example_start_rdma(struct example_session* session);

/*
 * Progresses until the context is idle again, calling between(session) (or NULL) before each
 * progress call; after `seconds` it logs, fails with TIME_OUT and progresses a bounded while more
 * so the context can reach idle.
 */
void example_run(struct example_session* session, double seconds,
                 void (*between)(struct example_session* session));

/* Destroys the RDMA context and the progress engine (the device stays open). */
void example_destroy_rdma(struct example_session* session);

#endif /* ZCSTORE_DOCA_EXAMPLE_COMMON_H_ */
