/*
 * DOCA memory maps: a range of memory plus who may touch it. A started map over the program's
 * own memory may be exported for RDMA; the peer creates a map from that export and uses it as
 * the remote side of rdma tasks. A map started with a PCI permission may be exported for PCI:
 * a process of this machine maps the same pages.
 */
#ifndef ZC_DOCA_MMAP_H_
#define ZC_DOCA_MMAP_H_

#include <stddef.h>
#include <stdint.h>

#include <doca_compat.h>
#include <doca_error.h>
#include <doca_types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct doca_mmap;
struct doca_dev;

DOCA_STABLE doca_error_t doca_mmap_create(struct doca_mmap** mmap);
/* Stops the map if needed, then frees it. Buffers taken from it must be gone. */
DOCA_STABLE doca_error_t doca_mmap_destroy(struct doca_mmap* mmap);
/* Validates the settings and makes the map usable; after this they are fixed. */
DOCA_STABLE doca_error_t doca_mmap_start(struct doca_mmap* mmap);
DOCA_STABLE doca_error_t doca_mmap_stop(struct doca_mmap* mmap);
/* Records the device; zcstore needs none to reach memory. */
DOCA_STABLE doca_error_t doca_mmap_add_dev(struct doca_mmap* mmap, struct doca_dev* dev);
DOCA_STABLE doca_error_t doca_mmap_rm_dev(struct doca_mmap* mmap, struct doca_dev* dev);
/* The program's memory, which must outlive the map. */
DOCA_STABLE doca_error_t doca_mmap_set_memrange(struct doca_mmap* mmap, void* addr, size_t len);
DOCA_STABLE doca_error_t doca_mmap_get_memrange(const struct doca_mmap* mmap, void** addr,
                                                size_t* len);
/* A mask of enum doca_access_flag; default DOCA_ACCESS_FLAG_LOCAL_READ_WRITE. */
DOCA_STABLE doca_error_t doca_mmap_set_permissions(struct doca_mmap* mmap, uint32_t access_mask);
DOCA_STABLE doca_error_t doca_mmap_set_user_data(struct doca_mmap* mmap, union doca_data user_data);
DOCA_STABLE doca_error_t doca_mmap_get_user_data(const struct doca_mmap* mmap,
                                                 union doca_data* user_data);
DOCA_STABLE doca_error_t doca_mmap_set_max_num_devices(struct doca_mmap* mmap,
                                                       uint32_t max_num_devices);
/* Export for RDMA (the map needs an rdma permission). The blob belongs to the map. */
DOCA_STABLE doca_error_t doca_mmap_export_rdma(struct doca_mmap* mmap, const struct doca_dev* dev,
                                               const void** export_desc, size_t* export_desc_len);
/*
 * Export for PCI: another process of this machine maps the same pages. The map must have been
 * started with DOCA_ACCESS_FLAG_PCI_READ_ONLY or _PCI_READ_WRITE (NOT_PERMITTED otherwise); such
 * a start adopts the program's range into shareable memory at the same addresses, which needs a
 * page-aligned address and length (INVALID_VALUE) of private read-write memory (NOT_PERMITTED).
 * doca_mmap_stop/destroy give the range back as private memory with its current contents. The
 * blob belongs to the map.
 */
DOCA_STABLE doca_error_t doca_mmap_export_pci(struct doca_mmap* mmap, const struct doca_dev* dev,
                                              const void** export_desc, size_t* export_desc_len);
/*
 * A started map from a peer's export; the blob is checked before use. An RDMA export describes
 * the peer's memory (the remote side of rdma tasks); a PCI export maps the peer's pages into this
 * process, and the map's range is that mapping's address here.
 */
DOCA_STABLE doca_error_t doca_mmap_create_from_export(const union doca_data* user_data,
                                                      const void* export_desc,
                                                      size_t export_desc_len, struct doca_dev* dev,
                                                      struct doca_mmap** mmap);

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_MMAP_H_ */
