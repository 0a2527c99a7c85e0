#include "core/status.hpp"

#include <array>

namespace zc {
namespace {

struct status_text {
  std::string_view name;
  std::string_view description;
};

constexpr std::array<status_text, status_count> texts = {{
    {"DOCA_SUCCESS", "Success"},
    {"DOCA_ERROR_UNKNOWN", "Unknown error"},
    {"DOCA_ERROR_NOT_PERMITTED", "Operation not permitted"},
    {"DOCA_ERROR_IN_USE", "Resource already in use"},
    {"DOCA_ERROR_NOT_SUPPORTED", "Operation not supported"},
    {"DOCA_ERROR_AGAIN", "Resource temporarily unavailable, try again"},
    {"DOCA_ERROR_INVALID_VALUE", "Invalid input"},
    {"DOCA_ERROR_NO_MEMORY", "Memory allocation failure"},
    {"DOCA_ERROR_INITIALIZATION", "Resource initialization failure"},
    {"DOCA_ERROR_TIME_OUT", "Timer expired waiting for resource"},
    {"DOCA_ERROR_SHUTDOWN", "Shut down in process or completed"},
    {"DOCA_ERROR_CONNECTION_RESET", "Connection reset by peer"},
    {"DOCA_ERROR_CONNECTION_ABORTED", "Connection aborted"},
    {"DOCA_ERROR_CONNECTION_INPROGRESS", "Connection in progress"},
    {"DOCA_ERROR_NOT_CONNECTED", "Not connected"},
    {"DOCA_ERROR_NO_LOCK", "Unable to acquire required lock"},
    {"DOCA_ERROR_NOT_FOUND", "Resource not found"},
    {"DOCA_ERROR_IO_FAILED", "Input/Output operation failed"},
    {"DOCA_ERROR_BAD_STATE", "Bad state"},
    {"DOCA_ERROR_UNSUPPORTED_VERSION", "Unsupported version"},
    {"DOCA_ERROR_OPERATING_SYSTEM", "Operating system call failure"},
    {"DOCA_ERROR_DRIVER", "DOCA Driver call failure"},
    {"DOCA_ERROR_UNEXPECTED", "Unexpected event or message"},
    {"DOCA_ERROR_ALREADY_EXIST", "Resource already exists"},
    {"DOCA_ERROR_FULL", "No more space in resource"},
    {"DOCA_ERROR_EMPTY", "No entry is available in resource"},
    {"DOCA_ERROR_IN_PROGRESS", "Operation is in progress"},
    {"DOCA_ERROR_TOO_BIG", "Requested operation too big"},
    {"DOCA_ERROR_AUTHENTICATION", "Authentication failure"},
    {"DOCA_ERROR_BAD_CONFIG", "Configuration is not valid"},
    {"DOCA_ERROR_SKIPPED", "Result is valid, but some previous output data was dropped"},
    {"DOCA_ERROR_DEVICE_FATAL_ERROR", "Device experienced a fatal error"},
}};

}  // namespace

status status_from_wire(uint32_t value) noexcept {
  return value < status_count ? static_cast<status>(value) : status::unknown;
}

std::string_view status_name(status s) noexcept {
  return texts[static_cast<uint32_t>(status_from_wire(static_cast<uint32_t>(s)))].name;
}

std::string_view status_description(status s) noexcept {
  return texts[static_cast<uint32_t>(status_from_wire(static_cast<uint32_t>(s)))].description;
}

void throw_if_failed(status s, const std::string& message) {
  if (!ok(s)) throw status_error(s, message);
}

}  // namespace zc
