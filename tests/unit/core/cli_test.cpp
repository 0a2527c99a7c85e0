// The command line every program shares: its own flags, the common ones, -j/--json config files
// (the command line wins over them) and the one-line, exit-code-2 answer to a bad command line.
#include "core/cli.hpp"

#include <gtest/gtest.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "core/status.hpp"
#include "support/subprocess.hpp"

namespace zc::core {
namespace {

constexpr const char* program = "zc_cli_test";

struct outcome {
  std::optional<int> exit_code;
  std::string err;
  std::string out;
};

// Runs cli.parse() on `program args...`, capturing what it prints.
outcome run(cli& c, const std::vector<std::string>& args) {
  std::vector<const char*> argv = {program};
  for (const auto& a : args) argv.push_back(a.c_str());
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  outcome o;
  o.exit_code = c.parse(static_cast<int>(argv.size()), argv.data());
  o.out = testing::internal::GetCapturedStdout();
  o.err = testing::internal::GetCapturedStderr();
  return o;
}

// A bad command line gets exactly one line on stderr, starting with the program name.
void expect_one_line_naming(const outcome& o, const std::string& what) {
  ASSERT_EQ(o.exit_code, std::optional<int>(exit_bad_usage)) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_EQ(o.err.rfind(program, 0), 0u) << o.err;
  EXPECT_NE(o.err.find(what), std::string::npos) << "\"" << what << "\" not in: " << o.err;
}

// A JSON config file that is removed when the test ends.
class json_file {
 public:
  explicit json_file(const std::string& text)
      : path_("/tmp/" + test::unique_name("zc-cli") + ".json") {
    std::ofstream(path_) << text;
  }
  ~json_file() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A program's own options on top of the shared ones, as the apps declare them.
class cli_test : public testing::Test {
 protected:
  cli_test() : c(program, "test program") {
    c.app().add_option("--listen-port", listen_port);
    c.app().add_option("--name", name);
    c.app().add_option("--ratio", ratio);
    c.app().add_option("--cpu", cpus);
    c.app().add_flag("--verbose", verbose);
  }
  void SetUp() override {
    saved_app_ = log::get_level(log::source::app);
    saved_sdk_ = log::get_level(log::source::sdk);
  }
  void TearDown() override {
    log::set_level(log::source::app, saved_app_);
    log::set_level(log::source::sdk, saved_sdk_);
  }

  cli c;
  int listen_port = 0;
  std::string name;
  double ratio = 0;
  std::vector<uint32_t> cpus;
  bool verbose = false;

 private:
  log::level saved_app_ = log::level::info;
  log::level saved_sdk_ = log::level::warning;
};

TEST_F(cli_test, no_flags_keeps_the_defaults) {
  auto o = run(c, {});
  EXPECT_EQ(o.exit_code, std::nullopt);
  EXPECT_TRUE(o.err.empty());
  EXPECT_EQ(c.polling(), poll_mode::adaptive);
  EXPECT_EQ(listen_port, 0);
  EXPECT_FALSE(verbose);
  EXPECT_EQ(c.program_name(), program);
}

TEST_F(cli_test, program_flags_parse) {
  auto o = run(c, {"--listen-port", "1234", "--name", "target", "--ratio", "0.25", "--verbose",
                   "--cpu", "0", "--cpu", "3"});
  ASSERT_EQ(o.exit_code, std::nullopt) << o.err;
  EXPECT_EQ(listen_port, 1234);
  EXPECT_EQ(name, "target");
  EXPECT_DOUBLE_EQ(ratio, 0.25);
  EXPECT_TRUE(verbose);
  EXPECT_EQ(cpus, (std::vector<uint32_t>{0, 3}));
}

TEST_F(cli_test, poll_mode_values_parse) {
  for (auto [word, mode] : {std::pair{"busy", poll_mode::busy},
                            {"event", poll_mode::event},
                            {"adaptive", poll_mode::adaptive},
                            {"EVENT", poll_mode::event}}) {
    cli fresh(program, "test program");
    auto o = run(fresh, {"--poll-mode", word});
    ASSERT_EQ(o.exit_code, std::nullopt) << word << ": " << o.err;
    EXPECT_EQ(fresh.polling(), mode) << word;
  }
}

TEST_F(cli_test, bad_poll_mode_is_refused_with_one_line) {
  expect_one_line_naming(run(c, {"--poll-mode", "sometimes"}), "--poll-mode");
}

TEST_F(cli_test, log_levels_are_applied) {
  auto o = run(c, {"-l", "70", "--sdk-log-level", "20"});
  ASSERT_EQ(o.exit_code, std::nullopt) << o.err;
  EXPECT_EQ(log::get_level(log::source::app), log::level::trace);
  EXPECT_EQ(log::get_level(log::source::sdk), log::level::critical);
}

TEST_F(cli_test, default_log_levels_are_info_and_warning) {
  log::set_level(log::source::app, log::level::trace);
  log::set_level(log::source::sdk, log::level::trace);
  ASSERT_EQ(run(c, {}).exit_code, std::nullopt);
  EXPECT_EQ(log::get_level(log::source::app), log::level::info);
  EXPECT_EQ(log::get_level(log::source::sdk), log::level::warning);
}

TEST_F(cli_test, log_level_55_is_refused_with_one_line) {
  log::set_level(log::source::app, log::level::error);
  expect_one_line_naming(run(c, {"--log-level", "55"}), "--log-level");
  // A refused command line changes nothing.
  EXPECT_EQ(log::get_level(log::source::app), log::level::error);
}

TEST_F(cli_test, log_level_that_is_not_a_number_is_refused) {
  expect_one_line_naming(run(c, {"-l", "loud"}), "--log-level");
}

TEST_F(cli_test, sdk_log_level_out_of_range_is_refused) {
  expect_one_line_naming(run(c, {"--sdk-log-level", "80"}), "--sdk-log-level");
}

TEST_F(cli_test, unknown_flag_is_refused_with_one_line) {
  expect_one_line_naming(run(c, {"--no-such-flag"}), "--no-such-flag");
}

TEST_F(cli_test, bad_value_for_a_program_flag_is_refused) {
  expect_one_line_naming(run(c, {"--listen-port", "many"}), "--listen-port");
}

TEST_F(cli_test, help_returns_zero_and_prints_usage) {
  for (const char* flag : {"-h", "--help"}) {
    cli fresh(program, "test program");
    fresh.app().add_option("--listen-port", listen_port);
    auto o = run(fresh, {flag});
    EXPECT_EQ(o.exit_code, std::optional<int>(0)) << flag;
    EXPECT_NE(o.out.find("--listen-port"), std::string::npos) << o.out;
    EXPECT_NE(o.out.find("--poll-mode"), std::string::npos) << o.out;
  }
}

TEST_F(cli_test, version_returns_zero) {
  auto o = run(c, {"--version"});
  EXPECT_EQ(o.exit_code, std::optional<int>(0));
  EXPECT_FALSE(o.out.empty());
}

TEST_F(cli_test, json_file_supplies_scalars) {
  json_file f(R"({"listen-port": 4321, "name": "from-json", "ratio": 0.5})");
  auto o = run(c, {"-j", f.path()});
  ASSERT_EQ(o.exit_code, std::nullopt) << o.err;
  EXPECT_EQ(listen_port, 4321);
  EXPECT_EQ(name, "from-json");
  EXPECT_DOUBLE_EQ(ratio, 0.5);
}

TEST_F(cli_test, json_array_repeats_the_flag) {
  json_file f(R"({"cpu": [0, 1, 3]})");
  auto o = run(c, {"--json", f.path()});
  ASSERT_EQ(o.exit_code, std::nullopt) << o.err;
  EXPECT_EQ(cpus, (std::vector<uint32_t>{0, 1, 3}));
}

TEST_F(cli_test, json_true_sets_a_flag_and_false_leaves_it_unset) {
  json_file on(R"({"verbose": true})");
  ASSERT_EQ(run(c, {"-j", on.path()}).exit_code, std::nullopt);
  EXPECT_TRUE(verbose);

  cli other(program, "test program");
  bool other_verbose = false;
  other.app().add_flag("--verbose", other_verbose);
  json_file off(R"({"verbose": false})");
  ASSERT_EQ(run(other, {"-j", off.path()}).exit_code, std::nullopt);
  EXPECT_FALSE(other_verbose);
}

TEST_F(cli_test, json_sets_the_shared_options_too) {
  json_file f(R"({"log-level": 60, "sdk-log-level": 30, "poll-mode": "event"})");
  ASSERT_EQ(run(c, {"-j", f.path()}).exit_code, std::nullopt);
  EXPECT_EQ(c.polling(), poll_mode::event);
  EXPECT_EQ(log::get_level(log::source::app), log::level::debug);
  EXPECT_EQ(log::get_level(log::source::sdk), log::level::error);
}

TEST_F(cli_test, json_keys_may_be_written_as_flags) {
  json_file f(R"({"--listen-port": 77, "-l": 30})");
  ASSERT_EQ(run(c, {"-j", f.path()}).exit_code, std::nullopt);
  EXPECT_EQ(listen_port, 77);
  EXPECT_EQ(log::get_level(log::source::app), log::level::error);
}

TEST_F(cli_test, command_line_overrides_json) {
  json_file f(R"({"listen-port": 1111, "name": "json", "poll-mode": "busy", "log-level": 60})");
  auto o = run(c, {"-j", f.path(), "--listen-port", "2222", "--poll-mode", "event", "-l", "30"});
  ASSERT_EQ(o.exit_code, std::nullopt) << o.err;
  EXPECT_EQ(listen_port, 2222);
  EXPECT_EQ(name, "json");  // not on the command line: the file's value stays
  EXPECT_EQ(c.polling(), poll_mode::event);
  EXPECT_EQ(log::get_level(log::source::app), log::level::error);
}

TEST_F(cli_test, command_line_overrides_json_given_after_it) {
  json_file f(R"({"listen-port": 1111})");
  auto o = run(c, {"--listen-port", "2222", "--json=" + f.path()});
  ASSERT_EQ(o.exit_code, std::nullopt) << o.err;
  EXPECT_EQ(listen_port, 2222);
}

TEST_F(cli_test, json_given_as_short_flag_with_attached_path_is_read) {
  json_file f(R"({"listen-port": 3333})");
  auto o = run(c, {"-j" + f.path()});
  ASSERT_EQ(o.exit_code, std::nullopt) << o.err;
  EXPECT_EQ(listen_port, 3333);
}

TEST_F(cli_test, bad_json_is_refused_with_one_line_naming_the_file) {
  json_file f("{\"listen-port\": 12,\n  oops\n}");
  expect_one_line_naming(run(c, {"-j", f.path()}), f.path());
}

TEST_F(cli_test, json_that_is_not_an_object_is_refused) {
  json_file f(R"([1, 2, 3])");
  expect_one_line_naming(run(c, {"-j", f.path()}), f.path());
}

TEST_F(cli_test, json_with_a_nested_object_is_refused) {
  json_file f(R"({"listen-port": {"value": 1}})");
  expect_one_line_naming(run(c, {"-j", f.path()}), "listen-port");
}

TEST_F(cli_test, json_with_a_null_value_is_refused) {
  json_file f(R"({"name": null})");
  expect_one_line_naming(run(c, {"-j", f.path()}), "name");
}

TEST_F(cli_test, json_with_an_unknown_key_is_refused) {
  json_file f(R"({"no-such-option": 1})");
  expect_one_line_naming(run(c, {"-j", f.path()}), "--no-such-option");
}

TEST_F(cli_test, missing_json_file_is_refused_with_one_line_naming_it) {
  const std::string path = "/tmp/" + test::unique_name("zc-cli-missing") + ".json";
  expect_one_line_naming(run(c, {"--json", path}), path);
}

TEST_F(cli_test, json_flag_without_a_file_is_refused) {
  expect_one_line_naming(run(c, {"-j"}), "json");
}

TEST(cli_json_to_args, object_becomes_flags) {
  auto words = cli::json_to_args(R"({"cpu": [0, 1], "listen-port": 1234, "verbose": true,
                                     "quiet": false, "name": "x", "-l": 60})");
  // nlohmann::json keeps object keys sorted.
  EXPECT_EQ(words, (std::vector<std::string>{"-l", "60", "--cpu", "0", "--cpu", "1",
                                             "--listen-port", "1234", "--name", "x", "--verbose"}));
}

TEST(cli_json_to_args, large_and_negative_numbers_keep_their_value) {
  auto words = cli::json_to_args(R"({"a": 18446744073709551615, "b": -5, "c": 1.5})");
  EXPECT_EQ(words,
            (std::vector<std::string>{"--a", "18446744073709551615", "--b", "-5", "--c", "1.5"}));
}

TEST(cli_json_to_args, malformed_input_throws_invalid_value) {
  for (const char* text : {"", "{", "[]", "42", "\"str\"", R"({"a": {"b": 1}})", R"({"a": [[1]]})",
                           R"({"a": [{"b": 1}]})", R"({"a": null})"}) {
    try {
      cli::json_to_args(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const status_error& e) {
      EXPECT_EQ(e.code(), status::invalid_value) << text;
    }
  }
}

}  // namespace
}  // namespace zc::core
