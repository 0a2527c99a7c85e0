#include "core/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace zc::log {
namespace internal {
std::atomic<int> levels[2] = {static_cast<int>(level::info), static_cast<int>(level::warning)};
}  // namespace internal

namespace {

spdlog::level::level_enum to_spdlog(level lvl) {
  switch (lvl) {
    case level::critical:
      return spdlog::level::critical;
    case level::error:
      return spdlog::level::err;
    case level::warning:
      return spdlog::level::warn;
    case level::info:
      return spdlog::level::info;
    case level::debug:
      return spdlog::level::debug;
    case level::trace:
      return spdlog::level::trace;
    case level::disable:
      break;
  }
  return spdlog::level::off;
}

std::shared_ptr<spdlog::logger> make_logger(const char* name) {
  // stdout like DOCA's default backend; flushed per line so that tests and pipes see lines as
  // they happen.
  auto logger =
      std::make_shared<spdlog::logger>(name, std::make_shared<spdlog::sinks::stdout_sink_mt>());
  logger->set_pattern("[%H:%M:%S.%f][%P][%n][%^%l%$] %v");
  logger->set_level(spdlog::level::trace);
  logger->flush_on(spdlog::level::trace);
  return logger;
}

spdlog::logger& logger_for(source src) {
  static const std::shared_ptr<spdlog::logger> loggers[2] = {make_logger("app"),
                                                             make_logger("zcstore")};
  return *loggers[static_cast<int>(src)];
}

}  // namespace

std::optional<level> level_from_int(int value) noexcept {
  if (value < 10 || value > 70 || value % 10 != 0) return std::nullopt;
  return static_cast<level>(value);
}

void set_level(source src, level lvl) noexcept {
  internal::levels[static_cast<int>(src)].store(static_cast<int>(lvl), std::memory_order_relaxed);
}

level get_level(source src) noexcept {
  return static_cast<level>(internal::levels[static_cast<int>(src)].load());
}

void internal::write(source src, level lvl, std::string_view text) noexcept {
  try {
    logger_for(src).log(to_spdlog(lvl), text);
  } catch (...) {
  }
}

}  // namespace zc::log
