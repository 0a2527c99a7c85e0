// zc::status: the DOCA error codes, with the same numbers, because they travel on the wire
// (control error_response, IO message result). The data path returns a status; the control path
// may throw zc::status_error, which carries one.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace zc {

enum class status : uint32_t {
  success = 0,
  unknown = 1,
  not_permitted = 2,
  in_use = 3,
  not_supported = 4,
  again = 5,
  invalid_value = 6,
  no_memory = 7,
  initialization = 8,
  time_out = 9,
  shutdown = 10,
  connection_reset = 11,
  connection_aborted = 12,
  connection_inprogress = 13,
  not_connected = 14,
  no_lock = 15,
  not_found = 16,
  io_failed = 17,
  bad_state = 18,
  unsupported_version = 19,
  operating_system = 20,
  driver = 21,
  unexpected = 22,
  already_exist = 23,
  full = 24,
  empty = 25,
  in_progress = 26,
  too_big = 27,
  authentication = 28,
  bad_config = 29,
  skipped = 30,
  device_fatal_error = 31,
};

inline constexpr uint32_t status_count = 32;

// "DOCA_ERROR_INVALID_VALUE"-style name, as the reference prints it.
std::string_view status_name(status s) noexcept;
// One-line human description ("Invalid input").
std::string_view status_description(status s) noexcept;
// Maps a wire value back to a status; values outside the table become status::unknown.
status status_from_wire(uint32_t value) noexcept;

inline constexpr bool ok(status s) noexcept {
  return s == status::success;
}

// Control-path exception: a status plus a message meant for a person (and for error_response).
class status_error : public std::runtime_error {
 public:
  status_error(status code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  status code() const noexcept { return code_; }

 private:
  status code_;
};

// Throws status_error(s, message) unless s is success.
void throw_if_failed(status s, const std::string& message);

}  // namespace zc
