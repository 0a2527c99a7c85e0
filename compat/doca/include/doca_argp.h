/*
 * DOCA Arg Parser: a program describes its flags (names, type, description, callback), and
 * doca_argp_start() parses the command line, or a JSON file given with -j/--json, and hands
 * each value to the flag's callback together with the program's configuration struct.
 * The parser adds DOCA's standard flags itself: -h/--help, -v/--version, -l/--log-level,
 * --sdk-log-level and -j/--json.
 *
 * Thread rules: the parser is one per process; call it from one thread (main), as DOCA
 * programs do. A callback may not re-enter the parser: while doca_argp_start() runs,
 * doca_argp_init(), doca_argp_start() and doca_argp_destroy() return DOCA_ERROR_BAD_STATE.
 *
 *   doca_argp_init("my_program", &cfg);
 *   struct doca_argp_param *p;
 *   doca_argp_param_create(&p);
 *   doca_argp_param_set_short_name(p, "d");
 *   doca_argp_param_set_long_name(p, "device");
 *   doca_argp_param_set_description(p, "device to use");
 *   doca_argp_param_set_callback(p, device_callback);   // gets (char *value, &cfg)
 *   doca_argp_param_set_type(p, DOCA_ARGP_TYPE_STRING);
 *   doca_argp_register_param(p);                        // the parser owns p now
 *   doca_argp_start(argc, argv);
 *   ...
 *   doca_argp_destroy();
 */
#ifndef ZC_DOCA_ARGP_H_
#define ZC_DOCA_ARGP_H_

#include <doca_compat.h>
#include <doca_error.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A flag's callback: `param` points at the parsed value (char * for STRING, int * for INT,
 * bool * for BOOLEAN), valid only during the call, and `config` is the struct given to
 * doca_argp_init(). A non-success return stops doca_argp_start() with that error.
 */
typedef doca_error_t (*doca_argp_param_cb_t)(void* param, void* config);

/* Receives the DPDK part of the command line (program name, then what precedes "--"). */
typedef doca_error_t (*doca_argp_dpdk_cb_t)(int argc, char** argv);

/* Checks the whole configuration once every flag was delivered; gets the config struct. */
typedef doca_error_t (*doca_argp_validation_cb_t)(void* config);

/* The type of a flag's value. The numbers are DOCA's. */
enum doca_argp_type {
  DOCA_ARGP_TYPE_UNKNOWN = 0,
  DOCA_ARGP_TYPE_STRING = 1,
  DOCA_ARGP_TYPE_INT = 2,
  DOCA_ARGP_TYPE_BOOLEAN = 3,
  DOCA_ARGP_TYPE_JSON_OBJ = 4, /* JSON files only; not supported by libzcstore-doca */
};

/* One flag's description, built with the setters below and handed to the parser. */
struct doca_argp_param;

/* Prints the usage text to stdout and ends the process with EXIT_SUCCESS. */
DOCA_EXPERIMENTAL void doca_argp_usage(void);

/*
 * Starts a parser for `program_name` (shown in the usage text). `program_config` is passed to
 * every callback; it may be NULL. BAD_STATE if a parser exists (until doca_argp_destroy()).
 */
DOCA_EXPERIMENTAL doca_error_t doca_argp_init(const char* program_name, void* program_config);

/*
 * Adds a flag. The parser takes the param in every case, failure included. INITIALIZATION when
 * it lacks a name, a description, a callback or a type; INVALID_VALUE when a name is taken
 * (the standard flags' names included); NOT_SUPPORTED for DOCA_ARGP_TYPE_JSON_OBJ.
 */
DOCA_EXPERIMENTAL doca_error_t doca_argp_register_param(struct doca_argp_param* input_param);

/*
 * Replaces what -v/--version prints: the callback runs, then the process exits with
 * EXIT_SUCCESS, or, when the callback fails, says so on stderr and exits with EXIT_FAILURE.
 */
DOCA_EXPERIMENTAL doca_error_t doca_argp_register_version_callback(doca_argp_param_cb_t callback);

/* Runs after every flag was delivered; its error is doca_argp_start()'s. */
DOCA_EXPERIMENTAL doca_error_t
doca_argp_register_validation_callback(doca_argp_validation_cb_t callback);

/*
 * Parses argv (argv[0] is the program). Flags: "-s value", "-s=value", "--long value",
 * "--long=value"; a BOOLEAN flag takes no value (it is true when given). Short names may be
 * longer than one character ("-ld"). On an error the reason and the usage go to stderr:
 * NOT_SUPPORTED for an unknown flag or JSON key, INVALID_VALUE for a bad value, a missing
 * value, a repeated flag, a missing mandatory flag or a stray argument, IO_FAILED when the
 * JSON file cannot be read or parsed, or the error a callback returned. -h prints the usage
 * and -v the version, then the process exits with EXIT_SUCCESS. BAD_STATE before
 * doca_argp_init(), or from a callback of this parser (no recursion).
 */
DOCA_EXPERIMENTAL doca_error_t doca_argp_start(int argc, char** argv);

/*
 * Ends the parser and frees the registered flags; doca_argp_init() may be called again.
 * BAD_STATE without a parser, or from a callback during doca_argp_start(): the parser is in use.
 */
DOCA_EXPERIMENTAL doca_error_t doca_argp_destroy(void);

/* Marks the program as DPDK-based: what precedes "--" goes to `callback` before parsing. */
DOCA_EXPERIMENTAL void doca_argp_set_dpdk_program(doca_argp_dpdk_cb_t callback);

/* A new, empty param. Free it with doca_argp_param_destroy() unless it gets registered. */
DOCA_EXPERIMENTAL doca_error_t doca_argp_param_create(struct doca_argp_param** param);

/* The setters copy their strings. At least one name is needed. */
DOCA_EXPERIMENTAL void doca_argp_param_set_short_name(struct doca_argp_param* param,
                                                      const char* name);
DOCA_EXPERIMENTAL void doca_argp_param_set_long_name(struct doca_argp_param* param,
                                                     const char* name);
/* What the usage shows after the names, e.g. "<path>". */
DOCA_EXPERIMENTAL void doca_argp_param_set_arguments(struct doca_argp_param* param,
                                                     const char* arguments);
DOCA_EXPERIMENTAL void doca_argp_param_set_description(struct doca_argp_param* param,
                                                       const char* description);
DOCA_EXPERIMENTAL void doca_argp_param_set_callback(struct doca_argp_param* param,
                                                    doca_argp_param_cb_t callback);
DOCA_EXPERIMENTAL void doca_argp_param_set_type(struct doca_argp_param* param,
                                                enum doca_argp_type type);
/* doca_argp_start() fails when a mandatory flag is given neither in argv nor in the JSON. */
DOCA_EXPERIMENTAL void doca_argp_param_set_mandatory(struct doca_argp_param* param);
/* The flag is refused in a JSON file. */
DOCA_EXPERIMENTAL void doca_argp_param_set_cli_only(struct doca_argp_param* param);
/* The flag may be given many times (a JSON array in a file); the callback runs for each. */
DOCA_EXPERIMENTAL void doca_argp_param_set_multiplicity(struct doca_argp_param* param);

/* Frees a param that was not registered. */
DOCA_EXPERIMENTAL doca_error_t doca_argp_param_destroy(struct doca_argp_param* param);

/*
 * The program's current log level: the one -l/--log-level set, else the one it had. It is read
 * from the logger, so a later doca_log_level_set_global_lower_limit() shows here too.
 */
DOCA_EXPERIMENTAL doca_error_t doca_argp_get_log_level(int* log_level);
/* The SDK's current log level: the one --sdk-log-level set, else the one it had (as above). */
DOCA_EXPERIMENTAL doca_error_t doca_argp_get_sdk_log_level(int* log_level);

#ifdef __cplusplus
}
#endif

#endif /* ZC_DOCA_ARGP_H_ */
