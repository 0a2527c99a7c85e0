/*
 * DOCA progress engine: one per thread. doca_pe_progress() polls the connected contexts once and
 * runs completion and state-changed callbacks; it never blocks.
 */
#ifndef ZC_DOCA_PE_H_
#define ZC_DOCA_PE_H_

#include <stddef.h>
#include <stdint.h>

#include <doca_compat.h>
#include <doca_error.h>
#include <doca_types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct doca_pe;
struct doca_ctx;

DOCA_STABLE doca_error_t doca_pe_create(struct doca_pe** pe);
/* Every connected context must have been destroyed (IN_USE otherwise). */
DOCA_STABLE doca_error_t doca_pe_destroy(struct doca_pe* pe);
/* 1 when anything happened (a completion, a state change, traffic), 0 otherwise. */
DOCA_STABLE uint8_t doca_pe_progress(struct doca_pe* pe);
/* Attaches an idle context to this engine for its whole life. */
DOCA_STABLE doca_error_t doca_pe_connect_ctx(struct doca_pe* pe, struct doca_ctx* ctx);
DOCA_STABLE doca_error_t doca_pe_get_num_inflight_tasks(const struct doca_pe* pe,
                                                        size_t* num_inflight_tasks);
/* Event mode. The handle is a file descriptor to poll/epoll: arm it with
 * doca_pe_request_notification() (it turns readable at once when work is already pending), sleep
 * on it, then doca_pe_clear_notification() and doca_pe_progress(). Task deadlines do not wake
 * it: bound the sleep (a second is plenty; a dead peer is found within a few). */
DOCA_STABLE doca_error_t doca_pe_get_notification_handle(const struct doca_pe* pe,
                                                         doca_notification_handle_t* handle);
DOCA_STABLE doca_error_t doca_pe_request_notification(struct doca_pe* pe);
DOCA_STABLE doca_error_t doca_pe_clear_notification(struct doca_pe* pe,
                                                    doca_notification_handle_t handle);

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_PE_H_ */
