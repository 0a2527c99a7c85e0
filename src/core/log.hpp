// Logging with the reference's numeric levels (10 disable ... 70 trace). Two sources: the
// application ("-l/--log-level") and the zcstore libraries ("--sdk-log-level", default warning),
// as DOCA separates app and SDK logs. Thread-safe; formatting happens only when enabled.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <optional>
#include <string_view>

namespace zc::log {

enum class level : int {
  disable = 10,
  critical = 20,
  error = 30,
  warning = 40,
  info = 50,
  debug = 60,
  trace = 70,
};

enum class source { app, sdk };

// Accepts exactly the reference's numbers 10, 20, ..., 70.
std::optional<level> level_from_int(int value) noexcept;

void set_level(source src, level lvl) noexcept;
level get_level(source src) noexcept;

namespace internal {
extern std::atomic<int> levels[2];
void write(source src, level lvl, std::string_view text) noexcept;
}  // namespace internal

inline bool enabled(source src, level lvl) noexcept {
  return static_cast<int>(lvl) <=
             internal::levels[static_cast<int>(src)].load(std::memory_order_relaxed) &&
         lvl != level::disable;
}

template <typename... Args>
void print(source src, level lvl, fmt::format_string<Args...> format, Args&&... args) noexcept {
  if (!enabled(src, lvl)) return;
  try {
    internal::write(src, lvl, fmt::format(format, std::forward<Args>(args)...));
  } catch (...) {
    // Logging must never take the process down.
  }
}

}  // namespace zc::log

#define ZC_LOG_AT(src, lvl, ...) \
  ::zc::log::print(::zc::log::source::src, ::zc::log::level::lvl, __VA_ARGS__)
#define ZC_LOG_CRIT(...) ZC_LOG_AT(app, critical, __VA_ARGS__)
#define ZC_LOG_ERROR(...) ZC_LOG_AT(app, error, __VA_ARGS__)
#define ZC_LOG_WARN(...) ZC_LOG_AT(app, warning, __VA_ARGS__)
#define ZC_LOG_INFO(...) ZC_LOG_AT(app, info, __VA_ARGS__)
#define ZC_LOG_DEBUG(...) ZC_LOG_AT(app, debug, __VA_ARGS__)
#define ZC_LOG_TRACE(...) ZC_LOG_AT(app, trace, __VA_ARGS__)
#define ZC_SDK_LOG_ERROR(...) ZC_LOG_AT(sdk, error, __VA_ARGS__)
#define ZC_SDK_LOG_WARN(...) ZC_LOG_AT(sdk, warning, __VA_ARGS__)
#define ZC_SDK_LOG_INFO(...) ZC_LOG_AT(sdk, info, __VA_ARGS__)
#define ZC_SDK_LOG_DEBUG(...) ZC_LOG_AT(sdk, debug, __VA_ARGS__)
#define ZC_SDK_LOG_TRACE(...) ZC_LOG_AT(sdk, trace, __VA_ARGS__)
