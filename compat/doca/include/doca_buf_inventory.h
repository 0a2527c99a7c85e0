/*
 * DOCA buffer inventory: a fixed number of buffer descriptors, made at start, so the data path
 * takes and returns buffers without allocating.
 */
#ifndef ZC_DOCA_BUF_INVENTORY_H_
#define ZC_DOCA_BUF_INVENTORY_H_

#include <stddef.h>
#include <stdint.h>

#include <doca_compat.h>
#include <doca_error.h>
#include <doca_types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct doca_buf;
struct doca_buf_inventory;
struct doca_mmap;

DOCA_STABLE doca_error_t doca_buf_inventory_create(size_t num_elements,
                                                   struct doca_buf_inventory** inventory);
/* Every buffer must have been released (IN_USE otherwise). */
DOCA_STABLE doca_error_t doca_buf_inventory_destroy(struct doca_buf_inventory* inventory);
DOCA_STABLE doca_error_t doca_buf_inventory_start(struct doca_buf_inventory* inventory);
DOCA_STABLE doca_error_t doca_buf_inventory_stop(struct doca_buf_inventory* inventory);
DOCA_STABLE doca_error_t doca_buf_inventory_get_num_elements(
    const struct doca_buf_inventory* inventory, uint32_t* num_of_elements);
DOCA_STABLE doca_error_t doca_buf_inventory_get_num_free_elements(
    const struct doca_buf_inventory* inventory, uint32_t* num_of_free_elements);
DOCA_STABLE doca_error_t doca_buf_inventory_set_user_data(struct doca_buf_inventory* inventory,
                                                          union doca_data user_data);
DOCA_STABLE doca_error_t doca_buf_inventory_get_user_data(
    const struct doca_buf_inventory* inventory, union doca_data* user_data);

/* A buffer over [addr, addr + len) of a started map, with an empty data section at addr. */
DOCA_STABLE doca_error_t doca_buf_inventory_buf_get_by_addr(struct doca_buf_inventory* inventory,
                                                            struct doca_mmap* mmap, void* addr,
                                                            size_t len, struct doca_buf** buf);
/* A buffer whose head and data section are both [data, data + data_len). */
DOCA_STABLE doca_error_t doca_buf_inventory_buf_get_by_data(struct doca_buf_inventory* inventory,
                                                            struct doca_mmap* mmap, void* data,
                                                            size_t data_len, struct doca_buf** buf);
/* A buffer over [addr, addr + len) with data section [data, data + data_len) inside it. */
DOCA_STABLE doca_error_t doca_buf_inventory_buf_get_by_args(struct doca_buf_inventory* inventory,
                                                            struct doca_mmap* mmap, void* addr,
                                                            size_t len, void* data, size_t data_len,
                                                            struct doca_buf** buf);
/* A new buffer (refcount 1) with the same window and data section as `src`. */
DOCA_STABLE doca_error_t doca_buf_inventory_buf_dup(struct doca_buf_inventory* inventory,
                                                    const struct doca_buf* src,
                                                    struct doca_buf** dst);

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_BUF_INVENTORY_H_ */
