/*
 * DOCA buffers: a window [head, head + len) of a memory map with a data section
 * [data, data + data_len) inside it, reference counted. Chained lists of buffers are not
 * supported in this slice: every buffer is a list of one.
 */
#ifndef ZC_DOCA_BUF_H_
#define ZC_DOCA_BUF_H_

#include <stddef.h>
#include <stdint.h>

#include <doca_compat.h>
#include <doca_error.h>

#ifdef __cplusplus
extern "C" {
#endif

struct doca_buf;

/* `refcount` (may be NULL) receives the count after the operation. */
DOCA_STABLE doca_error_t doca_buf_inc_refcount(struct doca_buf* buf, uint16_t* refcount);
/* At zero the buffer goes back to its inventory. */
DOCA_STABLE doca_error_t doca_buf_dec_refcount(struct doca_buf* buf, uint16_t* refcount);
DOCA_STABLE doca_error_t doca_buf_get_refcount(const struct doca_buf* buf, uint16_t* refcount);

DOCA_STABLE doca_error_t doca_buf_get_len(const struct doca_buf* buf, size_t* len);
DOCA_STABLE doca_error_t doca_buf_get_head(const struct doca_buf* buf, void** head);
DOCA_STABLE doca_error_t doca_buf_get_data_len(const struct doca_buf* buf, size_t* data_len);
DOCA_STABLE doca_error_t doca_buf_get_data(const struct doca_buf* buf, void** data);
/* [data, data + data_len) must lie inside [head, head + len). */
DOCA_STABLE doca_error_t doca_buf_set_data(struct doca_buf* buf, void* data, size_t data_len);
DOCA_STABLE doca_error_t doca_buf_set_data_len(struct doca_buf* buf, size_t data_len);
DOCA_STABLE doca_error_t doca_buf_reset_data_len(struct doca_buf* buf);

/* Lists: every buffer is a list of one here. */
DOCA_STABLE doca_error_t doca_buf_get_list_len(const struct doca_buf* buf, uint32_t* num_elements);
DOCA_STABLE doca_error_t doca_buf_get_next_in_list(struct doca_buf* buf,
                                                   struct doca_buf** next_buf);
DOCA_STABLE doca_error_t doca_buf_get_last_in_list(struct doca_buf* buf,
                                                   struct doca_buf** last_buf);
DOCA_STABLE doca_error_t doca_buf_is_first_in_list(const struct doca_buf* buf, uint8_t* is_first);
DOCA_STABLE doca_error_t doca_buf_is_last_in_list(const struct doca_buf* buf, uint8_t* is_last);
DOCA_STABLE doca_error_t doca_buf_is_in_list(const struct doca_buf* buf, uint8_t* is_in_list);
/* NOT_SUPPORTED in this slice. */
DOCA_STABLE doca_error_t doca_buf_chain_list(struct doca_buf* list1, struct doca_buf* list2);
DOCA_STABLE doca_error_t doca_buf_chain_list_tail(struct doca_buf* list1,
                                                  struct doca_buf* list1_tail,
                                                  struct doca_buf* list2);
DOCA_STABLE doca_error_t doca_buf_unchain_list(struct doca_buf* list1, struct doca_buf* list2);

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_BUF_H_ */
