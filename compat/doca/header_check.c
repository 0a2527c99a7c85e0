/* Compiles every libzcstore-doca header as C: a C program must be able to include each one. */
#include <doca_argp.h>
#include <doca_buf.h>
#include <doca_buf_inventory.h>
#include <doca_comch.h>
#include <doca_compat.h>
#include <doca_ctx.h>
#include <doca_dev.h>
#include <doca_error.h>
#include <doca_log.h>
#include <doca_mmap.h>
#include <doca_pe.h>
#include <doca_rdma.h>
#include <doca_sync_event.h>
#include <doca_types.h>

int zc_doca_header_check(void);
int zc_doca_header_check(void) {
  return (int)DOCA_ERROR_DEVICE_FATAL_ERROR + (int)DOCA_CTX_STATE_STOPPING;
}
