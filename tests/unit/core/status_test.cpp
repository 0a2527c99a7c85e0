// zc::status carries DOCA's numbers on the wire, so the table here is DOCA's, written out again
// by hand: a renumbering in status.hpp must fail this test, not silently change the protocol.
#include "core/status.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <string>

namespace zc {
namespace {

struct doca_entry {
  status code;
  uint32_t number;
  const char* name;
};

constexpr doca_entry doca_table[] = {
    {status::success, 0, "DOCA_SUCCESS"},
    {status::unknown, 1, "DOCA_ERROR_UNKNOWN"},
    {status::not_permitted, 2, "DOCA_ERROR_NOT_PERMITTED"},
    {status::in_use, 3, "DOCA_ERROR_IN_USE"},
    {status::not_supported, 4, "DOCA_ERROR_NOT_SUPPORTED"},
    {status::again, 5, "DOCA_ERROR_AGAIN"},
    {status::invalid_value, 6, "DOCA_ERROR_INVALID_VALUE"},
    {status::no_memory, 7, "DOCA_ERROR_NO_MEMORY"},
    {status::initialization, 8, "DOCA_ERROR_INITIALIZATION"},
    {status::time_out, 9, "DOCA_ERROR_TIME_OUT"},
    {status::shutdown, 10, "DOCA_ERROR_SHUTDOWN"},
    {status::connection_reset, 11, "DOCA_ERROR_CONNECTION_RESET"},
    {status::connection_aborted, 12, "DOCA_ERROR_CONNECTION_ABORTED"},
    {status::connection_inprogress, 13, "DOCA_ERROR_CONNECTION_INPROGRESS"},
    {status::not_connected, 14, "DOCA_ERROR_NOT_CONNECTED"},
    {status::no_lock, 15, "DOCA_ERROR_NO_LOCK"},
    {status::not_found, 16, "DOCA_ERROR_NOT_FOUND"},
    {status::io_failed, 17, "DOCA_ERROR_IO_FAILED"},
    {status::bad_state, 18, "DOCA_ERROR_BAD_STATE"},
    {status::unsupported_version, 19, "DOCA_ERROR_UNSUPPORTED_VERSION"},
    {status::operating_system, 20, "DOCA_ERROR_OPERATING_SYSTEM"},
    {status::driver, 21, "DOCA_ERROR_DRIVER"},
    {status::unexpected, 22, "DOCA_ERROR_UNEXPECTED"},
    {status::already_exist, 23, "DOCA_ERROR_ALREADY_EXIST"},
    {status::full, 24, "DOCA_ERROR_FULL"},
    {status::empty, 25, "DOCA_ERROR_EMPTY"},
    {status::in_progress, 26, "DOCA_ERROR_IN_PROGRESS"},
    {status::too_big, 27, "DOCA_ERROR_TOO_BIG"},
    {status::authentication, 28, "DOCA_ERROR_AUTHENTICATION"},
    {status::bad_config, 29, "DOCA_ERROR_BAD_CONFIG"},
    {status::skipped, 30, "DOCA_ERROR_SKIPPED"},
    {status::device_fatal_error, 31, "DOCA_ERROR_DEVICE_FATAL_ERROR"},
};

TEST(status, numbers_match_the_doca_table) {
  ASSERT_EQ(std::size(doca_table), status_count);
  for (const auto& entry : doca_table) {
    EXPECT_EQ(static_cast<uint32_t>(entry.code), entry.number) << entry.name;
  }
}

TEST(status, names_are_the_doca_names) {
  for (const auto& entry : doca_table) {
    EXPECT_EQ(status_name(entry.code), entry.name);
  }
}

TEST(status, every_code_has_a_distinct_one_line_description) {
  std::set<std::string> seen;
  for (const auto& entry : doca_table) {
    std::string text(status_description(entry.code));
    EXPECT_FALSE(text.empty()) << entry.name;
    EXPECT_EQ(text.find('\n'), std::string::npos) << entry.name;
    EXPECT_TRUE(seen.insert(text).second) << entry.name << " repeats \"" << text << "\"";
  }
  EXPECT_EQ(status_description(status::invalid_value), "Invalid input");
}

TEST(status, from_wire_maps_every_table_number_back) {
  for (const auto& entry : doca_table) {
    EXPECT_EQ(status_from_wire(entry.number), entry.code) << entry.name;
  }
}

TEST(status, from_wire_of_an_out_of_range_value_is_unknown) {
  EXPECT_EQ(status_from_wire(status_count), status::unknown);
  EXPECT_EQ(status_from_wire(32), status::unknown);
  EXPECT_EQ(status_from_wire(1000), status::unknown);
  EXPECT_EQ(status_from_wire(std::numeric_limits<uint32_t>::max()), status::unknown);
}

TEST(status, name_of_an_out_of_range_value_is_unknown_not_a_crash) {
  const auto bogus = static_cast<status>(std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(status_name(bogus), "DOCA_ERROR_UNKNOWN");
  EXPECT_EQ(status_description(bogus), "Unknown error");
  EXPECT_EQ(status_name(static_cast<status>(status_count)), "DOCA_ERROR_UNKNOWN");
}

TEST(status, ok_is_true_only_for_success) {
  EXPECT_TRUE(ok(status::success));
  for (const auto& entry : doca_table) {
    if (entry.code != status::success) {
      EXPECT_FALSE(ok(entry.code)) << entry.name;
    }
  }
}

TEST(status, throw_if_failed_is_silent_on_success) {
  EXPECT_NO_THROW(throw_if_failed(status::success, "unused"));
}

TEST(status, throw_if_failed_carries_the_code_and_the_message) {
  try {
    throw_if_failed(status::not_found, "no such export");
    FAIL() << "throw_if_failed did not throw";
  } catch (const status_error& e) {
    EXPECT_EQ(e.code(), status::not_found);
    EXPECT_STREQ(e.what(), "no such export");
  }
}

TEST(status, status_error_is_a_runtime_error) {
  const status_error e(status::bad_config, "bad flag");
  const std::runtime_error& base = e;
  EXPECT_STREQ(base.what(), "bad flag");
  EXPECT_EQ(e.code(), status::bad_config);
}

}  // namespace
}  // namespace zc
