/*
 * DOCA contexts and tasks. A context (doca_rdma_as_ctx(), ...) is connected to a progress
 * engine, configured while idle, then started; its state changes are reported through the
 * state-changed callback from doca_pe_progress(), never from inside doca_ctx_start()/stop().
 * Tasks of every type are submitted, freed and queried through the generic functions here.
 */
#ifndef ZC_DOCA_CTX_H_
#define ZC_DOCA_CTX_H_

#include <stddef.h>
#include <stdint.h>

#include <doca_compat.h>
#include <doca_error.h>
#include <doca_types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct doca_ctx;
struct doca_task;
struct doca_devinfo;

enum doca_ctx_states {
  DOCA_CTX_STATE_IDLE = 0,
  DOCA_CTX_STATE_STARTING = 1,
  DOCA_CTX_STATE_RUNNING = 2,
  DOCA_CTX_STATE_STOPPING = 3,
};

typedef void (*doca_ctx_state_changed_callback_t)(const union doca_data user_data,
                                                  struct doca_ctx* ctx,
                                                  enum doca_ctx_states prev_state,
                                                  enum doca_ctx_states next_state);

typedef void (*doca_task_completion_cb_t)(struct doca_task* task, union doca_data task_user_data,
                                          union doca_data ctx_user_data);

/* Idle -> starting (reported from the next doca_pe_progress()). The context must be connected to
 * a progress engine. */
DOCA_STABLE doca_error_t doca_ctx_start(struct doca_ctx* ctx);
/* Running/starting -> stopping; tasks in flight complete with errors, then idle. */
DOCA_STABLE doca_error_t doca_ctx_stop(struct doca_ctx* ctx);
/* The context's current state (callbacks may report it a progress call later). */
DOCA_STABLE doca_error_t doca_ctx_get_state(const struct doca_ctx* ctx,
                                            enum doca_ctx_states* state);
DOCA_STABLE doca_error_t doca_ctx_set_state_changed_cb(struct doca_ctx* ctx,
                                                       doca_ctx_state_changed_callback_t cb);
DOCA_STABLE doca_error_t doca_ctx_set_user_data(struct doca_ctx* ctx, union doca_data user_data);
DOCA_STABLE doca_error_t doca_ctx_get_user_data(const struct doca_ctx* ctx,
                                                union doca_data* user_data);
DOCA_STABLE doca_error_t doca_ctx_get_num_inflight_tasks(const struct doca_ctx* ctx,
                                                         size_t* num_inflight_tasks);

/* Starts a task; on success its completion callback runs later inside doca_pe_progress(). */
DOCA_STABLE doca_error_t doca_task_submit(struct doca_task* task);
/* As doca_task_submit(); AGAIN when the transport is momentarily full. */
DOCA_STABLE doca_error_t doca_task_try_submit(struct doca_task* task);
/* Returns a task that is not in flight to its context's pool. */
DOCA_STABLE void doca_task_free(struct doca_task* task);
/* The result of the last completion (DOCA_SUCCESS before any). */
DOCA_STABLE doca_error_t doca_task_get_status(const struct doca_task* task);
DOCA_STABLE void doca_task_set_user_data(struct doca_task* task, union doca_data user_data);
DOCA_STABLE union doca_data doca_task_get_user_data(const struct doca_task* task);
DOCA_STABLE struct doca_ctx* doca_task_get_ctx(const struct doca_task* task);

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_CTX_H_ */
