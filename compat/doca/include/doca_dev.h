/*
 * DOCA devices. zcstore has no NIC to enumerate: doca_devinfo_create_list() returns a fixed
 * table of names that map to zcstore devices (docs/DOCA_COMPAT.md, "Device table"):
 *   mlx5_0, mlx5_1  -> $ZCSTORE_DOCA_DEVICE, or "auto" (UCX picks: shared memory on one host)
 *   sm              -> zcstore "sm" (shared memory)
 *   tcp             -> zcstore "tcp"
 */
#ifndef ZC_DOCA_DEV_H_
#define ZC_DOCA_DEV_H_

#include <stdint.h>

#include <doca_compat.h>
#include <doca_error.h>

#ifdef __cplusplus
extern "C" {
#endif

struct doca_devinfo;
struct doca_dev;

#define DOCA_DEVINFO_IBDEV_NAME_SIZE 64
#define DOCA_DEVINFO_IFACE_NAME_SIZE 256
#define DOCA_DEVINFO_PCI_ADDR_SIZE 13
#define DOCA_DEVINFO_PCI_BDF_SIZE 8

/* The device table; free it with doca_devinfo_destroy_list(). */
DOCA_STABLE doca_error_t doca_devinfo_create_list(struct doca_devinfo*** dev_list,
                                                  uint32_t* nb_devs);
DOCA_STABLE doca_error_t doca_devinfo_destroy_list(struct doca_devinfo** dev_list);
/* Opens the zcstore device the entry maps to (a devinfo from a list stays valid in the dev). */
DOCA_STABLE doca_error_t doca_dev_open(struct doca_devinfo* devinfo, struct doca_dev** dev);
DOCA_STABLE doca_error_t doca_dev_close(struct doca_dev* dev);
DOCA_STABLE struct doca_devinfo* doca_dev_as_devinfo(const struct doca_dev* dev);

DOCA_STABLE doca_error_t doca_devinfo_get_ibdev_name(const struct doca_devinfo* devinfo,
                                                     char* ibdev_name, uint32_t size);
DOCA_STABLE doca_error_t doca_devinfo_get_iface_name(const struct doca_devinfo* devinfo,
                                                     char* iface_name, uint32_t size);
/* Writes "XXXX:XX:XX.X" (DOCA_DEVINFO_PCI_ADDR_SIZE bytes with the terminator). */
DOCA_STABLE doca_error_t doca_devinfo_get_pci_addr_str(const struct doca_devinfo* devinfo,
                                                       char* pci_addr_str);
/* Accepts "XXXX:XX:XX.X" or "XX:XX.X". */
DOCA_STABLE doca_error_t doca_devinfo_is_equal_pci_addr(const struct doca_devinfo* devinfo,
                                                        const char* pci_addr_str,
                                                        uint8_t* is_equal);

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_DEV_H_ */
