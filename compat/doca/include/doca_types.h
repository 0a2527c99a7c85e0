/*
 * Types shared by every DOCA library: user data, access flags, notification handles.
 */
#ifndef ZC_DOCA_TYPES_H_
#define ZC_DOCA_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#include <doca_compat.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A pointer or a 64-bit value the program attaches to a task, context or mmap. */
union doca_data {
  void* ptr;
  uint64_t u64;
};

/* Big-endian integers as DOCA spells them (the value is stored in network byte order). */
typedef uint16_t doca_be16_t;
typedef uint32_t doca_be32_t;
typedef uint64_t doca_be64_t;

/* A file descriptor on Linux. */
typedef int doca_event_handle_t;
typedef doca_event_handle_t doca_notification_handle_t;

/* Who may touch a memory map, and how (a bit mask; the numbers are DOCA's). */
enum doca_access_flag {
  DOCA_ACCESS_FLAG_LOCAL_READ_ONLY = 0,
  DOCA_ACCESS_FLAG_LOCAL_READ_WRITE = (1 << 0),
  DOCA_ACCESS_FLAG_RDMA_READ = (1 << 1),
  DOCA_ACCESS_FLAG_RDMA_WRITE = (1 << 2),
  DOCA_ACCESS_FLAG_RDMA_ATOMIC = (1 << 3),
  DOCA_ACCESS_FLAG_PCI_READ_ONLY = (1 << 4),
  DOCA_ACCESS_FLAG_PCI_READ_WRITE = (1 << 5),
  DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING = (1 << 6),
};

/* Length of a GID in bytes. */
#define DOCA_GID_BYTE_LENGTH 16

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_TYPES_H_ */
