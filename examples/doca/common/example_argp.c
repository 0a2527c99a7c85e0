#include "example_argp.h"

#include <stdio.h>
#include <string.h>

doca_error_t example_register_flag(const char* short_name, const char* long_name,
                                   const char* arguments, const char* description,
                                   enum doca_argp_type type, doca_argp_param_cb_t callback,
                                   bool mandatory) {
  struct doca_argp_param* param;
  doca_error_t result = doca_argp_param_create(&param);
  if (result != DOCA_SUCCESS) return result;
  if (short_name != NULL) doca_argp_param_set_short_name(param, short_name);
  doca_argp_param_set_long_name(param, long_name);
  doca_argp_param_set_arguments(param, arguments);
  doca_argp_param_set_description(param, description);
  doca_argp_param_set_callback(param, callback);
  doca_argp_param_set_type(param, type);
  if (mandatory) doca_argp_param_set_mandatory(param);
  return doca_argp_register_param(param);
}

doca_error_t example_copy_string(void* param, char* field, size_t size) {
  const char* value = (const char*)param;
  if (strlen(value) >= size) return DOCA_ERROR_INVALID_VALUE;
  snprintf(field, size, "%s", value);
  return DOCA_SUCCESS;
}
