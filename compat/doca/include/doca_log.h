/*
 * DOCA logging: a program registers named sources and prints through them with printf formats.
 * Messages go to zcstore's logger (stderr); the program's level and the SDK's level are kept
 * apart, as DOCA keeps them.
 */
#ifndef ZC_DOCA_LOG_H_
#define ZC_DOCA_LOG_H_

#include <stdint.h>
#include <stdio.h>

#include <doca_compat.h>
#include <doca_error.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Log levels; a higher number is more verbose. The numbers are DOCA's. */
enum doca_log_level {
  DOCA_LOG_LEVEL_DISABLE = 10,
  DOCA_LOG_LEVEL_CRIT = 20,
  DOCA_LOG_LEVEL_ERROR = 30,
  DOCA_LOG_LEVEL_WARNING = 40,
  DOCA_LOG_LEVEL_INFO = 50,
  DOCA_LOG_LEVEL_DEBUG = 60,
  DOCA_LOG_LEVEL_TRACE = 70,
};

struct doca_log_backend;

/* Program messages at or below `log_level` are printed. */
DOCA_EXPERIMENTAL doca_error_t doca_log_level_set_global_lower_limit(uint32_t log_level);
DOCA_EXPERIMENTAL uint32_t doca_log_level_get_global_lower_limit(void);
/* Validated and otherwise ignored: zcstore keeps one threshold per side (program, SDK). */
DOCA_EXPERIMENTAL doca_error_t doca_log_level_set_global_upper_limit(uint32_t log_level);
/* Standard backend for program messages (stderr here, as zcstore logs). */
DOCA_EXPERIMENTAL doca_error_t doca_log_backend_create_standard(void);
/* A backend for SDK messages. zcstore's SDK messages go to stderr whatever FILE is given. */
DOCA_EXPERIMENTAL doca_error_t
doca_log_backend_create_with_file_sdk(FILE* fptr, struct doca_log_backend** backend);
/* A backend for program messages. Same remark on FILE. */
DOCA_EXPERIMENTAL doca_error_t doca_log_backend_create_with_file(FILE* fptr,
                                                                 struct doca_log_backend** backend);
/* Threshold of the SDK's own messages (libzcstore-doca and zcstore underneath). */
DOCA_EXPERIMENTAL doca_error_t doca_log_backend_set_sdk_level(struct doca_log_backend* backend,
                                                              uint32_t level);
DOCA_EXPERIMENTAL doca_error_t doca_log_backend_get_sdk_level(struct doca_log_backend* backend,
                                                              uint32_t* level);

/* Registers a named source; `source` receives its id for doca_log(). */
DOCA_EXPERIMENTAL doca_error_t doca_log_register_source(const char* source_name, int* source);
DOCA_EXPERIMENTAL doca_error_t doca_log_unregister_source(int source);

/* Prints one message of `source` at `level` (use the DOCA_LOG_* macros). */
DOCA_EXPERIMENTAL doca_error_t doca_log(uint32_t level, int source, const char* fname, int line,
                                        const char* func, const char* format, ...)
    __attribute__((format(printf, 6, 7)));

/* Registers this file's log source at load time and drops it at unload. */
#define DOCA_LOG_REGISTER(SOURCE)                                                     \
  static int log_source;                                                              \
  static void __attribute__((constructor)) doca_log_source_register_##SOURCE(void) {  \
    doca_log_register_source(#SOURCE, &log_source);                                   \
  }                                                                                   \
  static void __attribute__((destructor)) doca_log_source_unregister_##SOURCE(void) { \
    doca_log_unregister_source(log_source);                                           \
  }

#define DOCA_LOG(level, format, ...) \
  doca_log(level, log_source, __FILE__, __LINE__, __func__, format, ##__VA_ARGS__)
#define DOCA_LOG_CRIT(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_CRIT, format, ##__VA_ARGS__)
#define DOCA_LOG_ERR(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_ERROR, format, ##__VA_ARGS__)
#define DOCA_LOG_WARN(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_WARNING, format, ##__VA_ARGS__)
#define DOCA_LOG_INFO(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_INFO, format, ##__VA_ARGS__)
#define DOCA_LOG_DBG(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_DEBUG, format, ##__VA_ARGS__)
#define DOCA_LOG_TRC(format, ...) DOCA_LOG(DOCA_LOG_LEVEL_TRACE, format, ##__VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_LOG_H_ */
