// Log levels use the reference's numbers; "disable" turns a source off entirely.
#include "core/log.hpp"

#include <gtest/gtest.h>

#include <optional>

namespace zc::log {
namespace {

class log_test : public testing::Test {
 protected:
  void SetUp() override {
    saved_app_ = get_level(source::app);
    saved_sdk_ = get_level(source::sdk);
  }
  void TearDown() override {
    set_level(source::app, saved_app_);
    set_level(source::sdk, saved_sdk_);
  }

 private:
  level saved_app_ = level::info;
  level saved_sdk_ = level::warning;
};

TEST(log_levels, only_the_reference_numbers_are_levels) {
  EXPECT_EQ(level_from_int(10), std::optional<level>(level::disable));
  EXPECT_EQ(level_from_int(20), std::optional<level>(level::critical));
  EXPECT_EQ(level_from_int(30), std::optional<level>(level::error));
  EXPECT_EQ(level_from_int(40), std::optional<level>(level::warning));
  EXPECT_EQ(level_from_int(50), std::optional<level>(level::info));
  EXPECT_EQ(level_from_int(60), std::optional<level>(level::debug));
  EXPECT_EQ(level_from_int(70), std::optional<level>(level::trace));
  for (int bad : {-10, 0, 5, 9, 11, 55, 71, 80, 1000}) {
    EXPECT_EQ(level_from_int(bad), std::nullopt) << bad;
  }
}

TEST_F(log_test, sources_have_separate_levels) {
  set_level(source::app, level::debug);
  set_level(source::sdk, level::error);
  EXPECT_EQ(get_level(source::app), level::debug);
  EXPECT_EQ(get_level(source::sdk), level::error);
  EXPECT_TRUE(enabled(source::app, level::debug));
  EXPECT_FALSE(enabled(source::app, level::trace));
  EXPECT_TRUE(enabled(source::sdk, level::critical));
  EXPECT_FALSE(enabled(source::sdk, level::warning));
}

TEST_F(log_test, disable_turns_a_source_off) {
  set_level(source::app, level::disable);
  EXPECT_FALSE(enabled(source::app, level::critical));
  EXPECT_FALSE(enabled(source::app, level::disable));
}

TEST_F(log_test, printing_with_arguments_does_not_throw) {
  set_level(source::app, level::trace);
  testing::internal::CaptureStdout();
  ZC_LOG_INFO("value {} and {}", 42, "text");
  ZC_LOG_TRACE("trace line");
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("value 42 and text"), std::string::npos) << out;
  EXPECT_NE(out.find("trace line"), std::string::npos) << out;
}

TEST_F(log_test, lines_below_the_level_are_not_printed) {
  set_level(source::sdk, level::error);
  testing::internal::CaptureStdout();
  ZC_SDK_LOG_DEBUG("hidden {}", 1);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(out.find("hidden"), std::string::npos) << out;
}

}  // namespace
}  // namespace zc::log
