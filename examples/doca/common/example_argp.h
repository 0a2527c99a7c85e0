/*
 * What the DOCA examples that parse their flags with doca_argp share: declaring a flag in one
 * call, and copying a string value into a fixed-size configuration field.
 */
#ifndef ZCSTORE_DOCA_EXAMPLE_ARGP_H_
#define ZCSTORE_DOCA_EXAMPLE_ARGP_H_

#include <stdbool.h>
#include <stddef.h>

#include <doca_argp.h>
#include <doca_error.h>

/* Registers one flag with doca_argp; `short_name` may be NULL. */
doca_error_t example_register_flag(const char* short_name, const char* long_name,
                                   const char* arguments, const char* description,
                                   enum doca_argp_type type, doca_argp_param_cb_t callback,
                                   bool mandatory);

/* Copies an argp string value into `field` of `size` bytes; a value that does not fit is refused
 * with DOCA_ERROR_INVALID_VALUE. */
doca_error_t example_copy_string(void* param, char* field, size_t size);

#endif /* ZCSTORE_DOCA_EXAMPLE_ARGP_H_ */
