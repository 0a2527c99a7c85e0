/*
 * zcstore libzcstore-doca: DOCA's documented C API over zcstore (written from the public
 * documentation; see docs/DOCA_COMPAT.md). Visibility and stability markers.
 */
#ifndef ZC_DOCA_COMPAT_H_
#define ZC_DOCA_COMPAT_H_

#if defined(__GNUC__) || defined(__clang__)
#define DOCA_EXPORTED __attribute__((visibility("default")))
#else
#define DOCA_EXPORTED
#endif

/* DOCA marks each function stable or experimental; here both are simply exported. */
#define DOCA_STABLE DOCA_EXPORTED
#define DOCA_EXPERIMENTAL DOCA_EXPORTED

#endif /* ZC_DOCA_COMPAT_H_ */
