// doca_error.h and doca_log.h over zc::status and zc::log.
#include <doca_error.h>
#include <doca_log.h>

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "objects.hpp"

namespace zc::doca {
namespace {

// The registries are never destroyed: programs unregister their sources from destructors
// (DOCA_LOG_REGISTER) that may run after this library's static objects are gone.
std::mutex& registry_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

// Registered source names, by id; an unregistered slot is empty.
std::vector<std::string>& sources() {
  static auto* names = new std::vector<std::string>;
  return *names;
}

std::set<std::string>& reported_unsupported() {
  static auto* names = new std::set<std::string>;
  return *names;
}

// The single backend object handed out: zcstore has one logger.
struct doca_log_backend* the_backend() {
  static char backend;
  return reinterpret_cast<struct doca_log_backend*>(&backend);
}

}  // namespace

doca_error_t not_supported(const char* function) noexcept {
  try {
    std::lock_guard lock(registry_mutex());
    if (reported_unsupported().insert(function).second)
      ZC_SDK_LOG_WARN("{}: not supported by libzcstore-doca (see docs/DOCA_COMPAT.md)", function);
  } catch (...) {
  }
  return DOCA_ERROR_NOT_SUPPORTED;
}

}  // namespace zc::doca

using zc::doca::guarded;

extern "C" {

const char* doca_error_get_name(doca_error_t error) {
  // The table's names are string literals: NUL-terminated.
  return zc::status_name(zc::status_from_wire(static_cast<uint32_t>(error))).data();
}

const char* doca_error_get_descr(doca_error_t error) {
  return zc::status_description(zc::status_from_wire(static_cast<uint32_t>(error))).data();
}

doca_error_t doca_log_level_set_global_lower_limit(uint32_t log_level) {
  auto level = zc::log::level_from_int(static_cast<int>(log_level));
  if (!level) return DOCA_ERROR_INVALID_VALUE;
  zc::log::set_level(zc::log::source::app, *level);
  return DOCA_SUCCESS;
}

uint32_t doca_log_level_get_global_lower_limit(void) {
  return static_cast<uint32_t>(zc::log::get_level(zc::log::source::app));
}

doca_error_t doca_log_level_set_global_upper_limit(uint32_t log_level) {
  return zc::log::level_from_int(static_cast<int>(log_level)) ? DOCA_SUCCESS
                                                              : DOCA_ERROR_INVALID_VALUE;
}

doca_error_t doca_log_backend_create_standard(void) {
  return DOCA_SUCCESS;
}

doca_error_t doca_log_backend_create_with_file_sdk(FILE* fptr, struct doca_log_backend** backend) {
  if (fptr == nullptr || backend == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *backend = zc::doca::the_backend();
  return DOCA_SUCCESS;
}

doca_error_t doca_log_backend_create_with_file(FILE* fptr, struct doca_log_backend** backend) {
  return doca_log_backend_create_with_file_sdk(fptr, backend);
}

doca_error_t doca_log_backend_set_sdk_level(struct doca_log_backend* backend, uint32_t level) {
  auto lvl = zc::log::level_from_int(static_cast<int>(level));
  if (backend == nullptr || !lvl) return DOCA_ERROR_INVALID_VALUE;
  zc::log::set_level(zc::log::source::sdk, *lvl);
  return DOCA_SUCCESS;
}

doca_error_t doca_log_backend_get_sdk_level(struct doca_log_backend* backend, uint32_t* level) {
  if (backend == nullptr || level == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *level = static_cast<uint32_t>(zc::log::get_level(zc::log::source::sdk));
  return DOCA_SUCCESS;
}

doca_error_t doca_log_register_source(const char* source_name, int* source) {
  if (source_name == nullptr || source == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    std::lock_guard lock(zc::doca::registry_mutex());
    auto& names = zc::doca::sources();
    names.emplace_back(source_name);
    *source = static_cast<int>(names.size() - 1);
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_log_unregister_source(int source) {
  return guarded(__func__, [&] {
    std::lock_guard lock(zc::doca::registry_mutex());
    auto& names = zc::doca::sources();
    if (source < 0 || static_cast<size_t>(source) >= names.size() || names[source].empty())
      return DOCA_ERROR_NOT_FOUND;
    names[source].clear();
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_log(uint32_t level, int source, const char* fname, int line, const char* func,
                      const char* format, ...) {
  (void)fname;
  (void)line;
  auto lvl = zc::log::level_from_int(static_cast<int>(level));
  if (!lvl || format == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (!zc::log::enabled(zc::log::source::app, *lvl)) return DOCA_SUCCESS;
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  // Formatted here, before the guard: va_start belongs to this function, not to a lambda.
  std::string text;
  doca_error_t result = DOCA_SUCCESS;
  try {
    if (n > 0) {
      text.resize(static_cast<size_t>(n) + 1);
      std::vsnprintf(text.data(), text.size(), format, again);
      text.resize(static_cast<size_t>(n));
    }
  } catch (...) {
    result = DOCA_ERROR_NO_MEMORY;
  }
  va_end(again);
  if (result != DOCA_SUCCESS) return result;
  return guarded(__func__, [&] {
    std::string name = "?";
    {
      std::lock_guard lock(zc::doca::registry_mutex());
      auto& names = zc::doca::sources();
      if (source >= 0 && static_cast<size_t>(source) < names.size() && !names[source].empty())
        name = names[source];
    }
    zc::log::internal::write(zc::log::source::app, *lvl,
                             "[" + name + "][" + (func ? func : "?") + "] " + text);
    return DOCA_SUCCESS;
  });
}

}  // extern "C"
