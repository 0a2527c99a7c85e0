// doca_argp as a DOCA program uses it: flags of every type by short and long name, DOCA's
// standard flags (-h, -v, -l, --sdk-log-level, -j), JSON configuration files, and the errors a
// user's command line or file can cause.
#include <doca_argp.h>
#include <doca_error.h>
#include <doca_log.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

static_assert(DOCA_ARGP_TYPE_UNKNOWN == 0 && DOCA_ARGP_TYPE_STRING == 1 &&
              DOCA_ARGP_TYPE_INT == 2 && DOCA_ARGP_TYPE_BOOLEAN == 3 &&
              DOCA_ARGP_TYPE_JSON_OBJ == 4);

// What the test program's callbacks write, as a DOCA sample's config struct.
struct config {
  std::string device;
  int count = -1;
  bool verbose = false;
  int verbose_calls = 0;
  std::vector<std::string> names;
  int queue = -1;
  std::string secret;
  int validations = 0;
  doca_error_t device_result = DOCA_SUCCESS;
  doca_error_t validation_result = DOCA_SUCCESS;
  std::vector<std::string> delivered;  // the flags whose callbacks ran, in order
  std::vector<doca_error_t> nested;    // what parser calls made from a callback returned
  uint32_t level_at_count = 0;         // the program's log level when on_count ran
  int sdk_level_at_count = 0;
};

config& cfg(void* c) {
  return *static_cast<config*>(c);
}

doca_error_t on_device(void* param, void* c) {
  cfg(c).delivered.emplace_back("device");
  cfg(c).device = static_cast<const char*>(param);
  return cfg(c).device_result;
}
doca_error_t on_count(void* param, void* c) {
  cfg(c).delivered.emplace_back("count");
  cfg(c).level_at_count = doca_log_level_get_global_lower_limit();
  doca_argp_get_sdk_log_level(&cfg(c).sdk_level_at_count);
  cfg(c).count = *static_cast<int*>(param);
  return DOCA_SUCCESS;
}
doca_error_t on_verbose(void* param, void* c) {
  cfg(c).delivered.emplace_back("verbose");
  cfg(c).verbose = *static_cast<bool*>(param);
  ++cfg(c).verbose_calls;
  return DOCA_SUCCESS;
}
doca_error_t on_name(void* param, void* c) {
  cfg(c).names.emplace_back(static_cast<const char*>(param));
  return DOCA_SUCCESS;
}
doca_error_t on_queue(void* param, void* c) {
  cfg(c).queue = *static_cast<int*>(param);
  return DOCA_SUCCESS;
}
doca_error_t on_secret(void* param, void* c) {
  cfg(c).secret = static_cast<const char*>(param);
  return DOCA_SUCCESS;
}
doca_error_t on_validate(void* c) {
  ++cfg(c).validations;
  return cfg(c).validation_result;
}
doca_error_t on_version(void*, void* c) {
  std::fprintf(stderr, "custom version, queue %d\n", cfg(c).queue);
  return DOCA_SUCCESS;
}

struct flag {
  const char* short_name;
  const char* long_name;
  doca_argp_type type;
  doca_argp_param_cb_t callback;
  bool mandatory = false;
  bool multi = false;
  bool cli_only = false;
};

doca_argp_param* make_param(const flag& f) {
  doca_argp_param* p = nullptr;
  EXPECT_EQ(doca_argp_param_create(&p), DOCA_SUCCESS);
  if (f.short_name) doca_argp_param_set_short_name(p, f.short_name);
  if (f.long_name) doca_argp_param_set_long_name(p, f.long_name);
  doca_argp_param_set_arguments(p, "<value>");
  doca_argp_param_set_description(p, "a test flag");
  doca_argp_param_set_callback(p, f.callback);
  doca_argp_param_set_type(p, f.type);
  if (f.mandatory) doca_argp_param_set_mandatory(p);
  if (f.multi) doca_argp_param_set_multiplicity(p);
  if (f.cli_only) doca_argp_param_set_cli_only(p);
  return p;
}

// argv as main() gets it: mutable strings, argv[0] the program.
struct command_line {
  explicit command_line(std::initializer_list<std::string> args) : strings{"argp_test"} {
    strings.insert(strings.end(), args);
    for (auto& s : strings) pointers.push_back(s.data());
    pointers.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(strings.size()); }
  char** argv() { return pointers.data(); }
  std::vector<std::string> strings;
  std::vector<char*> pointers;
};

// Callbacks that call the parser back, as a confused program might.
doca_error_t on_destroy_inside(void*, void* c) {
  cfg(c).nested.push_back(doca_argp_destroy());
  return DOCA_SUCCESS;
}
doca_error_t on_start_inside(void*, void* c) {
  command_line again({"--restart"});
  cfg(c).nested.push_back(doca_argp_start(again.argc(), again.argv()));
  cfg(c).nested.push_back(doca_argp_init("again", c));
  return DOCA_SUCCESS;
}

class doca_argp : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_app_level = doca_log_level_get_global_lower_limit();
    ASSERT_EQ(doca_log_backend_create_with_file_sdk(stderr, &sdk_backend), DOCA_SUCCESS);
    ASSERT_EQ(doca_log_backend_get_sdk_level(sdk_backend, &saved_sdk_level), DOCA_SUCCESS);
    ASSERT_EQ(doca_argp_init("argp_test", &c), DOCA_SUCCESS);
  }

  void TearDown() override {
    EXPECT_EQ(doca_argp_destroy(), DOCA_SUCCESS);
    doca_log_level_set_global_lower_limit(saved_app_level);
    doca_log_backend_set_sdk_level(sdk_backend, saved_sdk_level);
    if (!json_dir.empty()) std::filesystem::remove_all(json_dir);
  }

  // -d/--device STRING, -c/--count INT, -V/--verbose BOOLEAN, -n/--name STRING (repeatable),
  // -ld/--queue-depth INT (a DOCA-style multi-character short name), --secret (command line
  // only).
  void register_program_flags(bool device_mandatory = false) {
    ASSERT_EQ(doca_argp_register_param(
                  make_param({"d", "device", DOCA_ARGP_TYPE_STRING, on_device, device_mandatory})),
              DOCA_SUCCESS);
    ASSERT_EQ(doca_argp_register_param(make_param({"c", "count", DOCA_ARGP_TYPE_INT, on_count})),
              DOCA_SUCCESS);
    ASSERT_EQ(
        doca_argp_register_param(make_param({"V", "verbose", DOCA_ARGP_TYPE_BOOLEAN, on_verbose})),
        DOCA_SUCCESS);
    ASSERT_EQ(doca_argp_register_param(
                  make_param({"n", "name", DOCA_ARGP_TYPE_STRING, on_name, false, true})),
              DOCA_SUCCESS);
    ASSERT_EQ(
        doca_argp_register_param(make_param({"ld", "queue-depth", DOCA_ARGP_TYPE_INT, on_queue})),
        DOCA_SUCCESS);
    ASSERT_EQ(doca_argp_register_param(make_param(
                  {nullptr, "secret", DOCA_ARGP_TYPE_STRING, on_secret, false, false, true})),
              DOCA_SUCCESS);
  }

  doca_error_t start(std::initializer_list<std::string> args) {
    command_line cl(args);
    return doca_argp_start(cl.argc(), cl.argv());
  }

  // Starts and returns what the parser wrote to stderr.
  std::string start_capturing_stderr(std::initializer_list<std::string> args,
                                     doca_error_t expected) {
    ::testing::internal::CaptureStderr();
    const doca_error_t r = start(args);
    std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(r, expected) << doca_error_get_name(r) << "\n" << err;
    return err;
  }

  std::string write_json(const std::string& text) {
    if (json_dir.empty()) {
      json_dir =
          std::filesystem::temp_directory_path() / ("zc_argp_test_" + std::to_string(::getpid()));
      std::filesystem::create_directories(json_dir);
    }
    const auto path = json_dir / ("config" + std::to_string(files++) + ".json");
    std::ofstream(path) << text;
    return path.string();
  }

  config c;
  uint32_t saved_app_level = 0;
  uint32_t saved_sdk_level = 0;
  doca_log_backend* sdk_backend = nullptr;
  std::filesystem::path json_dir;
  int files = 0;
};

TEST_F(doca_argp, every_type_by_short_names) {
  register_program_flags();
  ASSERT_EQ(start({"-d", "mlx5_0", "-c", "42", "-V", "-ld", "7"}), DOCA_SUCCESS);
  EXPECT_EQ(c.device, "mlx5_0");
  EXPECT_EQ(c.count, 42);
  EXPECT_TRUE(c.verbose);
  EXPECT_EQ(c.verbose_calls, 1);
  EXPECT_EQ(c.queue, 7);
  EXPECT_TRUE(c.names.empty());
}

TEST_F(doca_argp, every_type_by_long_names_with_and_without_equals) {
  register_program_flags();
  ASSERT_EQ(start({"--device=03:00.0", "--count", "-5", "--verbose", "--queue-depth=010",
                   "--secret", "a b=c"}),
            DOCA_SUCCESS);
  EXPECT_EQ(c.device, "03:00.0");
  EXPECT_EQ(c.count, -5);  // a value that looks like a flag is still the value
  EXPECT_TRUE(c.verbose);
  EXPECT_EQ(c.queue, 10);  // decimal, never octal
  EXPECT_EQ(c.secret, "a b=c");
}

TEST_F(doca_argp, short_names_take_equals_too) {
  register_program_flags();
  c.device = "unset";
  ASSERT_EQ(start({"-d=", "-c=2147483647", "-ld=-2147483648"}), DOCA_SUCCESS);
  EXPECT_EQ(c.device, "");  // given, and empty
  EXPECT_EQ(c.count, 2147483647);
  EXPECT_EQ(c.queue, INT32_MIN);
}

TEST_F(doca_argp, a_boolean_takes_no_value_or_true_or_false) {
  register_program_flags();
  ASSERT_EQ(start({"--verbose=false", "-d", "x"}), DOCA_SUCCESS);
  EXPECT_FALSE(c.verbose);
  EXPECT_EQ(c.verbose_calls, 1);
  // A bare boolean does not swallow the next argument.
  c = config{};
  ASSERT_EQ(start({"-V", "-d", "y"}), DOCA_SUCCESS);
  EXPECT_TRUE(c.verbose);
  EXPECT_EQ(c.device, "y");
  start_capturing_stderr({"--verbose=yes"}, DOCA_ERROR_INVALID_VALUE);
}

TEST_F(doca_argp, flags_not_given_leave_the_config_alone) {
  register_program_flags();
  ASSERT_EQ(start({}), DOCA_SUCCESS);
  EXPECT_EQ(c.device, "");
  EXPECT_EQ(c.count, -1);
  EXPECT_EQ(c.verbose_calls, 0);
}

TEST_F(doca_argp, a_repeatable_flag_calls_back_for_each_value_in_order) {
  register_program_flags();
  ASSERT_EQ(start({"-n", "first", "--name", "second", "--name=third"}), DOCA_SUCCESS);
  EXPECT_EQ(c.names, (std::vector<std::string>{"first", "second", "third"}));
}

TEST_F(doca_argp, a_flag_given_twice_is_refused) {
  register_program_flags();
  const auto err = start_capturing_stderr({"-c", "1", "--count", "2"}, DOCA_ERROR_INVALID_VALUE);
  EXPECT_NE(err.find("given twice"), std::string::npos) << err;
  EXPECT_EQ(c.count, -1);  // no callback ran for a wrong command line
}

TEST_F(doca_argp, a_missing_mandatory_flag_fails_with_the_usage_and_no_callback) {
  register_program_flags(/*device_mandatory=*/true);
  const auto err = start_capturing_stderr({"--count", "3"}, DOCA_ERROR_INVALID_VALUE);
  EXPECT_NE(err.find("argp_test: missing mandatory flag '--device'"), std::string::npos) << err;
  EXPECT_NE(err.find("Usage: argp_test [DOCA Flags] [Program Flags]"), std::string::npos) << err;
  EXPECT_NE(err.find("-d, --device <value>"), std::string::npos) << err;
  EXPECT_NE(err.find("a test flag (mandatory)"), std::string::npos) << err;
  EXPECT_EQ(c.count, -1);
  c = config{};
  ASSERT_EQ(start({"--count", "3", "-d", "sm"}), DOCA_SUCCESS);
  EXPECT_EQ(c.device, "sm");
}

TEST_F(doca_argp, an_unknown_flag_is_not_supported_and_shows_the_usage) {
  register_program_flags();
  auto err = start_capturing_stderr({"-d", "sm", "--nope"}, DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(err.find("argp_test: unknown flag '--nope'"), std::string::npos) << err;
  EXPECT_NE(err.find("Usage: argp_test"), std::string::npos) << err;
  EXPECT_EQ(c.device, "");
  // A short name is matched whole: -l is the log level, -ld a program flag, -lx nothing.
  err = start_capturing_stderr({"-lx", "3"}, DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(err.find("unknown flag '-lx'"), std::string::npos) << err;
  // A long name with one dash is not a long name.
  start_capturing_stderr({"-device", "sm"}, DOCA_ERROR_NOT_SUPPORTED);
}

TEST_F(doca_argp, a_stray_argument_or_a_missing_value_is_invalid) {
  register_program_flags();
  auto err = start_capturing_stderr({"-d", "sm", "extra"}, DOCA_ERROR_INVALID_VALUE);
  EXPECT_NE(err.find("unexpected argument 'extra'"), std::string::npos) << err;
  err = start_capturing_stderr({"--device"}, DOCA_ERROR_INVALID_VALUE);
  EXPECT_NE(err.find("flag '--device' needs a value"), std::string::npos) << err;
  start_capturing_stderr({"--"}, DOCA_ERROR_INVALID_VALUE);
}

TEST_F(doca_argp, a_bad_integer_is_invalid) {
  register_program_flags();
  // "+5" is refused: the only sign is '-', as in JSON.
  for (const char* bad : {"12x", "", "x", "0x10", " 1", "1 ", "+5", "-", "--1", "2147483648",
                          "-2147483649", "99999999999999999999"}) {
    const auto err = start_capturing_stderr({"--count", bad}, DOCA_ERROR_INVALID_VALUE);
    EXPECT_NE(err.find("flag '--count' needs an integer, not '" + std::string(bad) + "'"),
              std::string::npos)
        << err;
    EXPECT_EQ(c.count, -1);
  }
}

TEST_F(doca_argp, a_callback_error_is_returned_as_it_is) {
  register_program_flags();
  c.device_result = DOCA_ERROR_NOT_PERMITTED;
  const auto err = start_capturing_stderr({"-d", "forbidden", "-c", "1"}, DOCA_ERROR_NOT_PERMITTED);
  EXPECT_NE(err.find("the callback of flag -d failed"), std::string::npos) << err;
  EXPECT_EQ(c.device, "forbidden");
  EXPECT_EQ(c.count, -1);  // delivery stops at the first failure
}

TEST_F(doca_argp, a_callback_cannot_destroy_the_parser) {
  register_program_flags();
  ASSERT_EQ(doca_argp_register_param(
                make_param({nullptr, "destroy", DOCA_ARGP_TYPE_BOOLEAN, on_destroy_inside})),
            DOCA_SUCCESS);
  ASSERT_EQ(start({"--destroy", "-d", "after"}), DOCA_SUCCESS);
  EXPECT_EQ(c.nested, (std::vector<doca_error_t>{DOCA_ERROR_BAD_STATE}));
  EXPECT_EQ(c.device, "after");  // the parse went on with its flags
}

TEST_F(doca_argp, a_callback_cannot_start_or_init_the_parser_again) {
  register_program_flags();
  ASSERT_EQ(doca_argp_register_param(
                make_param({nullptr, "restart", DOCA_ARGP_TYPE_BOOLEAN, on_start_inside})),
            DOCA_SUCCESS);
  ASSERT_EQ(start({"--restart", "-c", "4"}), DOCA_SUCCESS);
  EXPECT_EQ(c.nested, (std::vector<doca_error_t>{DOCA_ERROR_BAD_STATE, DOCA_ERROR_BAD_STATE}));
  EXPECT_EQ(c.count, 4);
  // Once start returned, the parser may be started again.
  c.nested.clear();
  ASSERT_EQ(start({"--restart"}), DOCA_SUCCESS);
  EXPECT_EQ(c.nested.size(), 2u);
}

TEST_F(doca_argp, the_validation_callback_runs_last_and_its_error_is_returned) {
  register_program_flags();
  ASSERT_EQ(doca_argp_register_validation_callback(on_validate), DOCA_SUCCESS);
  ASSERT_EQ(start({"-c", "1"}), DOCA_SUCCESS);
  EXPECT_EQ(c.validations, 1);
  c.validation_result = DOCA_ERROR_BAD_CONFIG;
  start_capturing_stderr({"-c", "2"}, DOCA_ERROR_BAD_CONFIG);
  EXPECT_EQ(c.validations, 2);
  EXPECT_EQ(c.count, 2);
}

TEST_F(doca_argp, log_level_flags_set_the_program_and_sdk_levels) {
  register_program_flags();
  ASSERT_EQ(start({"-l", "60", "--sdk-log-level=20"}), DOCA_SUCCESS);
  EXPECT_EQ(doca_log_level_get_global_lower_limit(), 60u);
  uint32_t sdk = 0;
  ASSERT_EQ(doca_log_backend_get_sdk_level(sdk_backend, &sdk), DOCA_SUCCESS);
  EXPECT_EQ(sdk, 20u);
  int level = 0;
  ASSERT_EQ(doca_argp_get_log_level(&level), DOCA_SUCCESS);
  EXPECT_EQ(level, 60);
  ASSERT_EQ(doca_argp_get_sdk_log_level(&level), DOCA_SUCCESS);
  EXPECT_EQ(level, 20);
  // The getters read the logger: a level the program sets later shows.
  ASSERT_EQ(doca_log_level_set_global_lower_limit(DOCA_LOG_LEVEL_ERROR), DOCA_SUCCESS);
  ASSERT_EQ(doca_argp_get_log_level(&level), DOCA_SUCCESS);
  EXPECT_EQ(level, DOCA_LOG_LEVEL_ERROR);
  ASSERT_EQ(start({"--log-level=70"}), DOCA_SUCCESS);
  EXPECT_EQ(doca_log_level_get_global_lower_limit(), 70u);
  const auto err = start_capturing_stderr({"-l", "35"}, DOCA_ERROR_INVALID_VALUE);
  EXPECT_NE(err.find("log level 35 is not one of 10, 20, ..., 70"), std::string::npos) << err;
  start_capturing_stderr({"--sdk-log-level", "80"}, DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_argp_get_log_level(nullptr), DOCA_ERROR_INVALID_VALUE);
}

TEST_F(doca_argp, log_levels_are_set_before_any_program_callback_runs) {
  register_program_flags();
  ASSERT_EQ(start({"-c", "1", "-l", "70", "--sdk-log-level", "60"}), DOCA_SUCCESS);
  EXPECT_EQ(c.level_at_count, 70u);
  EXPECT_EQ(c.sdk_level_at_count, 60);
  ASSERT_EQ(start({"-j", write_json(R"({"count": 2, "log-level": 30, "sdk-log-level": 20})")}),
            DOCA_SUCCESS);
  EXPECT_EQ(c.level_at_count, 30u);
  EXPECT_EQ(c.sdk_level_at_count, 20);
}

TEST_F(doca_argp, a_failed_start_leaves_the_log_levels_as_they_were) {
  register_program_flags();
  ASSERT_EQ(doca_argp_register_validation_callback(on_validate), DOCA_SUCCESS);
  int app_before = 0;
  int sdk_before = 0;
  ASSERT_EQ(doca_argp_get_log_level(&app_before), DOCA_SUCCESS);
  ASSERT_EQ(doca_argp_get_sdk_log_level(&sdk_before), DOCA_SUCCESS);
  ASSERT_NE(app_before, 70);
  ASSERT_NE(sdk_before, 60);
  auto expect_levels_unchanged = [&] {
    int app = 0;
    int sdk = 0;
    ASSERT_EQ(doca_argp_get_log_level(&app), DOCA_SUCCESS);
    ASSERT_EQ(doca_argp_get_sdk_log_level(&sdk), DOCA_SUCCESS);
    EXPECT_EQ(app, app_before);
    EXPECT_EQ(sdk, sdk_before);
  };
  // A program callback fails...
  c.device_result = DOCA_ERROR_NOT_PERMITTED;
  start_capturing_stderr({"-l", "70", "--sdk-log-level", "60", "-d", "x"},
                         DOCA_ERROR_NOT_PERMITTED);
  expect_levels_unchanged();
  // ...or the validation does.
  c.device_result = DOCA_SUCCESS;
  c.validation_result = DOCA_ERROR_BAD_CONFIG;
  start_capturing_stderr({"-l", "70", "--sdk-log-level", "60"}, DOCA_ERROR_BAD_CONFIG);
  expect_levels_unchanged();
}

TEST_F(doca_argp, log_levels_not_given_report_the_current_ones) {
  ASSERT_EQ(doca_log_level_set_global_lower_limit(DOCA_LOG_LEVEL_WARNING), DOCA_SUCCESS);
  int level = 0;
  ASSERT_EQ(doca_argp_get_log_level(&level), DOCA_SUCCESS);
  EXPECT_EQ(level, DOCA_LOG_LEVEL_WARNING);
  ASSERT_EQ(doca_argp_get_sdk_log_level(&level), DOCA_SUCCESS);
  EXPECT_EQ(level, static_cast<int>(saved_sdk_level));
}

TEST_F(doca_argp, a_json_file_gives_every_type_by_long_name) {
  register_program_flags(/*device_mandatory=*/true);
  const auto path = write_json(R"({
    "device": "mlx5_1",
    "count": -12,
    "verbose": true,
    "name": ["x", "y"],
    "queue-depth": 64,
    "log-level": 70
  })");
  ASSERT_EQ(start({"-j", path}), DOCA_SUCCESS);
  EXPECT_EQ(c.device, "mlx5_1");
  EXPECT_EQ(c.count, -12);
  EXPECT_TRUE(c.verbose);
  EXPECT_EQ(c.names, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(c.queue, 64);
  EXPECT_EQ(doca_log_level_get_global_lower_limit(), 70u);  // not the default, 50
}

TEST_F(doca_argp, a_json_file_may_use_doca_sections_and_mix_with_the_command_line) {
  register_program_flags();
  const auto path = write_json(R"({
    "doca_dpdk_flags": {},
    "doca_general_flags": {"log-level": 60, "sdk-log-level": 30},
    "doca_program_flags": {"device": "tcp", "verbose": false, "name": []}
  })");
  ASSERT_EQ(start({"--json=" + path, "--count", "9", "--secret", "s"}), DOCA_SUCCESS);
  EXPECT_EQ(c.device, "tcp");
  EXPECT_FALSE(c.verbose);
  EXPECT_EQ(c.verbose_calls, 1);
  EXPECT_TRUE(c.names.empty());
  EXPECT_EQ(c.count, 9);
  EXPECT_EQ(c.secret, "s");
  EXPECT_EQ(doca_log_level_get_global_lower_limit(), 60u);
  int sdk = 0;
  ASSERT_EQ(doca_argp_get_sdk_log_level(&sdk), DOCA_SUCCESS);
  EXPECT_EQ(sdk, 30);
}

TEST_F(doca_argp, json_flags_are_delivered_in_file_order) {
  register_program_flags();
  // Not alphabetical: DOCA's json-c parser delivers a file's flags in the order written.
  ASSERT_EQ(start({"-j", write_json(R"({"verbose": true, "device": "sm", "count": 3})")}),
            DOCA_SUCCESS);
  EXPECT_EQ(c.delivered, (std::vector<std::string>{"verbose", "device", "count"}));
}

TEST_F(doca_argp, a_deeply_nested_json_value_is_refused_without_crashing) {
  register_program_flags();
  // 100,000 nested arrays (200 KB): copying such a value recurses once per level.
  constexpr int depth = 100'000;
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  for (const char* key : {"device", "name"}) {
    const auto err =
        start_capturing_stderr({"-j", write_json("{\"" + std::string(key) + "\": " + deep + "}")},
                               DOCA_ERROR_INVALID_VALUE);
    EXPECT_NE(err.find("'" + std::string(key) + "' (JSON) needs a string"), std::string::npos)
        << key;
  }
  EXPECT_TRUE(c.delivered.empty());
}

TEST_F(doca_argp, a_malformed_or_missing_json_file_is_an_io_failure) {
  register_program_flags();
  auto err =
      start_capturing_stderr({"-j", write_json(R"({"device": "sm",)")}, DOCA_ERROR_IO_FAILED);
  EXPECT_NE(err.find("is not valid JSON"), std::string::npos) << err;
  EXPECT_EQ(c.device, "");
  err = start_capturing_stderr({"-j", "/nonexistent/zc_argp.json"}, DOCA_ERROR_IO_FAILED);
  EXPECT_NE(err.find("cannot open JSON file '/nonexistent/zc_argp.json'"), std::string::npos)
      << err;
  start_capturing_stderr({"-j", write_json("[1, 2]")}, DOCA_ERROR_INVALID_VALUE);
  start_capturing_stderr({"-j"}, DOCA_ERROR_INVALID_VALUE);
}

TEST_F(doca_argp, only_a_regular_json_file_of_at_most_1_mib_is_read) {
  register_program_flags();
  // Valid JSON one byte over the limit: refused before it is read. (ASSERT: without the limit
  // the cases below would read /dev/zero until memory ran out and block on the FIFO.)
  constexpr size_t limit = 1 << 20;
  const std::string prefix = R"({"device": ")";
  const std::string suffix = R"("})";
  const auto big =
      write_json(prefix + std::string(limit + 1 - prefix.size() - suffix.size(), 'x') + suffix);
  ASSERT_EQ(std::filesystem::file_size(big), limit + 1);
  auto err = start_capturing_stderr({"-j", big}, DOCA_ERROR_IO_FAILED);
  ASSERT_NE(err.find("JSON file '" + big + "' is larger than 1048576 bytes"), std::string::npos)
      << err;
  ASSERT_EQ(c.device, "");
  // At the limit it is read.
  const auto fits =
      write_json(prefix + std::string(limit - prefix.size() - suffix.size(), 'y') + suffix);
  ASSERT_EQ(start({"-j", fits}), DOCA_SUCCESS);
  EXPECT_EQ(c.device.size(), limit - prefix.size() - suffix.size());

  err = start_capturing_stderr({"-j", "/dev/zero"}, DOCA_ERROR_IO_FAILED);
  EXPECT_NE(err.find("JSON file '/dev/zero' is not a regular file"), std::string::npos) << err;
  const auto fifo = json_dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  err = start_capturing_stderr({"-j", fifo.string()}, DOCA_ERROR_IO_FAILED);
  EXPECT_NE(err.find("is not a regular file"), std::string::npos) << err;
  err = start_capturing_stderr({"-j", json_dir.string()}, DOCA_ERROR_IO_FAILED);
  EXPECT_NE(err.find("is not a regular file"), std::string::npos) << err;
}

TEST_F(doca_argp, json_values_of_the_wrong_type_are_invalid) {
  register_program_flags();
  for (const char* text :
       {R"({"count": "7"})", R"({"count": 7.5})", R"({"count": 4294967296})",
        R"({"count": 18446744073709551615})", R"({"count": 2147483648})",
        R"({"count": -2147483649})", R"({"verbose": 1})", R"({"verbose": "true"})",
        R"({"device": 5})", R"({"device": null})", R"({"name": "x"})", R"({"name": ["x", 2]})",
        R"({"log-level": "60"})", R"({"doca_program_flags": []})"}) {
    const auto err = start_capturing_stderr({"-j", write_json(text)}, DOCA_ERROR_INVALID_VALUE);
    EXPECT_NE(err.find("Usage: argp_test"), std::string::npos) << text << "\n" << err;
  }
  EXPECT_EQ(c.count, -1);
  EXPECT_EQ(c.verbose_calls, 0);
  EXPECT_EQ(c.device, "");
}

TEST_F(doca_argp, unknown_or_command_line_only_json_keys_are_not_supported) {
  register_program_flags();
  auto err =
      start_capturing_stderr({"-j", write_json(R"({"devcie": "sm"})")}, DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(err.find("unknown JSON key 'devcie'"), std::string::npos) << err;
  err = start_capturing_stderr({"-j", write_json(R"({"secret": "s"})")}, DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(err.find("flag 'secret' is accepted on the command line only"), std::string::npos)
      << err;
  // Short names are not JSON keys; neither are the command-line acts.
  start_capturing_stderr({"-j", write_json(R"({"d": "sm"})")}, DOCA_ERROR_NOT_SUPPORTED);
  start_capturing_stderr({"-j", write_json(R"({"help": true})")}, DOCA_ERROR_NOT_SUPPORTED);
  start_capturing_stderr({"-j", write_json(R"({"doca_dpdk_flags": {"devices": []}})")},
                         DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(c.secret, "");
}

TEST_F(doca_argp, a_flag_in_both_the_json_file_and_the_command_line_is_refused) {
  register_program_flags();
  const auto path = write_json(R"({"count": 1})");
  const auto err = start_capturing_stderr({"-j", path, "-c", "2"}, DOCA_ERROR_INVALID_VALUE);
  EXPECT_NE(err.find("given twice"), std::string::npos) << err;
  EXPECT_EQ(c.count, -1);
  // A repeatable flag adds up instead.
  ASSERT_EQ(start({"-j", write_json(R"({"name": ["a"]})"), "-n", "b"}), DOCA_SUCCESS);
  EXPECT_EQ(c.names, (std::vector<std::string>{"a", "b"}));
}

TEST_F(doca_argp, a_json_key_given_twice_is_refused) {
  register_program_flags();
  auto err = start_capturing_stderr({"-j", write_json(R"({"count": 1, "count": 2})")},
                                    DOCA_ERROR_INVALID_VALUE);
  EXPECT_NE(err.find("has key 'count' twice"), std::string::npos) << err;
  EXPECT_EQ(c.count, -1);
  // Within a section too; the same key in two objects is two keys.
  err = start_capturing_stderr(
      {"-j", write_json(R"({"doca_program_flags": {"device": "a", "device": "b"}})")},
      DOCA_ERROR_INVALID_VALUE);
  EXPECT_NE(err.find("has key 'device' twice"), std::string::npos) << err;
  EXPECT_EQ(c.device, "");
  err = start_capturing_stderr({"-j", write_json(R"({"doca_general_flags": {"log-level": 60},
                                                    "doca_program_flags": {"log-level": 70}})")},
                               DOCA_ERROR_INVALID_VALUE);
  EXPECT_NE(err.find("flag 'log-level' (JSON) given twice"), std::string::npos) << err;
  err = start_capturing_stderr({"-j", write_json(R"({"x": {"a": 1}, "y": {"a": 2}})")},
                               DOCA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(err.find("unknown JSON key 'x'"), std::string::npos) << err;
}

TEST_F(doca_argp, help_prints_the_usage_and_exits_0) {
  register_program_flags(/*device_mandatory=*/true);
  // The usage goes to stdout; the child sends stdout to stderr, which EXPECT_EXIT matches.
  EXPECT_EXIT(
      {
        ::dup2(2, 1);
        start({"-d", "sm", "--help", "--nope"});
      },
      ::testing::ExitedWithCode(0),
      "Usage: argp_test \\[DOCA Flags\\] \\[Program Flags\\].*-h, --help.*-j, --json <path>.*"
      "-ld, --queue-depth <value>.*--secret <value>");
  EXPECT_EXIT(
      {
        ::dup2(2, 1);
        start({"-h"});
      },
      ::testing::ExitedWithCode(0), "-d, --device <value> +a test flag \\(mandatory\\)");
  EXPECT_EXIT(
      {
        ::dup2(2, 1);
        doca_argp_usage();
      },
      ::testing::ExitedWithCode(0), "-n, --name <value> +a test flag \\(may be repeated\\)");
}

TEST_F(doca_argp, version_prints_and_exits_0) {
  EXPECT_EXIT(
      {
        ::dup2(2, 1);
        start({"--version"});
      },
      ::testing::ExitedWithCode(0), "argp_test\nDOCA API version: 2\\.9\\.0 \\(libzcstore-doca");
  c.queue = 77;
  ASSERT_EQ(doca_argp_register_version_callback(on_version), DOCA_SUCCESS);
  EXPECT_EXIT(start({"-v"}), ::testing::ExitedWithCode(0), "custom version, queue 77");
}

TEST_F(doca_argp, a_failing_version_callback_says_so_and_exits_1) {
  ASSERT_EQ(doca_argp_register_version_callback([](void*, void*) { return DOCA_ERROR_IO_FAILED; }),
            DOCA_SUCCESS);
  EXPECT_EXIT(start({"-v"}), ::testing::ExitedWithCode(1),
              "argp_test: the version callback failed: ");
}

TEST_F(doca_argp, an_empty_or_null_argv_is_refused) {
  register_program_flags();
  char* argv[] = {nullptr};
  EXPECT_EQ(doca_argp_start(0, argv), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_argp_start(1, nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_argp_start(-1, argv), DOCA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(c.delivered.empty());
}

TEST_F(doca_argp, registration_checks_the_param) {
  doca_argp_param* p = nullptr;
  // No description.
  ASSERT_EQ(doca_argp_param_create(&p), DOCA_SUCCESS);
  doca_argp_param_set_long_name(p, "x");
  doca_argp_param_set_callback(p, on_device);
  doca_argp_param_set_type(p, DOCA_ARGP_TYPE_STRING);
  EXPECT_EQ(doca_argp_register_param(p), DOCA_ERROR_INITIALIZATION);  // and p is freed
  // No type, no callback, no name.
  for (int missing = 0; missing < 3; ++missing) {
    ASSERT_EQ(doca_argp_param_create(&p), DOCA_SUCCESS);
    doca_argp_param_set_description(p, "d");
    if (missing != 0) doca_argp_param_set_type(p, DOCA_ARGP_TYPE_INT);
    if (missing != 1) doca_argp_param_set_callback(p, on_count);
    if (missing != 2) doca_argp_param_set_short_name(p, "q");
    EXPECT_EQ(doca_argp_register_param(p), DOCA_ERROR_INITIALIZATION) << missing;
  }
  // The standard flags' names are reserved, and a name is taken once.
  for (const flag& f : {flag{"j", "jj", DOCA_ARGP_TYPE_STRING, on_device},
                        flag{nullptr, "json", DOCA_ARGP_TYPE_STRING, on_device},
                        flag{"h", nullptr, DOCA_ARGP_TYPE_BOOLEAN, on_verbose},
                        flag{nullptr, "sdk-log-level", DOCA_ARGP_TYPE_INT, on_count}})
    EXPECT_EQ(doca_argp_register_param(make_param(f)), DOCA_ERROR_INVALID_VALUE);
  ASSERT_EQ(doca_argp_register_param(make_param({"d", "device", DOCA_ARGP_TYPE_STRING, on_device})),
            DOCA_SUCCESS);
  EXPECT_EQ(doca_argp_register_param(make_param({"d", "other", DOCA_ARGP_TYPE_STRING, on_device})),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_argp_register_param(make_param({"o", "device", DOCA_ARGP_TYPE_STRING, on_device})),
            DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_argp_register_param(make_param({"o", "obj", DOCA_ARGP_TYPE_JSON_OBJ, on_device})),
            DOCA_ERROR_NOT_SUPPORTED);
  // An unregistered param is the program's to free.
  ASSERT_EQ(doca_argp_param_create(&p), DOCA_SUCCESS);
  EXPECT_EQ(doca_argp_param_destroy(p), DOCA_SUCCESS);
  EXPECT_EQ(doca_argp_param_destroy(nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_argp_param_create(nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_argp_register_param(nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_argp_register_validation_callback(nullptr), DOCA_ERROR_INVALID_VALUE);
  EXPECT_EQ(doca_argp_register_version_callback(nullptr), DOCA_ERROR_INVALID_VALUE);
  // Only the one good flag is known.
  ASSERT_EQ(start({"-d", "sm"}), DOCA_SUCCESS);
  EXPECT_EQ(c.device, "sm");
  start_capturing_stderr({"--x", "1"}, DOCA_ERROR_NOT_SUPPORTED);
}

TEST_F(doca_argp, dpdk_flags_before_the_double_dash_go_to_the_dpdk_callback) {
  register_program_flags();
  static std::vector<std::string> dpdk_seen;
  dpdk_seen.clear();
  doca_argp_set_dpdk_program([](int argc, char** argv) {
    for (int i = 0; i < argc; ++i) dpdk_seen.emplace_back(argv[i]);
    return argv[argc] == nullptr ? DOCA_SUCCESS : DOCA_ERROR_UNEXPECTED;
  });
  ASSERT_EQ(start({"-a", "0000:03:00.0", "--", "-d", "sm"}), DOCA_SUCCESS);
  EXPECT_EQ(dpdk_seen, (std::vector<std::string>{"argp_test", "-a", "0000:03:00.0"}));
  EXPECT_EQ(c.device, "sm");
}

TEST(doca_argp_lifecycle, init_once_destroy_then_init_again) {
  config first;
  config second;
  doca_argp_param* p = nullptr;
  ASSERT_EQ(doca_argp_param_create(&p), DOCA_SUCCESS);
  doca_argp_param_set_long_name(p, "device");
  doca_argp_param_set_description(p, "d");
  doca_argp_param_set_callback(p, on_device);
  doca_argp_param_set_type(p, DOCA_ARGP_TYPE_STRING);
  EXPECT_EQ(doca_argp_register_param(p), DOCA_ERROR_BAD_STATE);  // before init; p is freed
  command_line cl({"--device", "sm"});
  EXPECT_EQ(doca_argp_start(cl.argc(), cl.argv()), DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_argp_destroy(), DOCA_ERROR_BAD_STATE);
  EXPECT_EQ(doca_argp_init(nullptr, &first), DOCA_ERROR_INVALID_VALUE);

  ASSERT_EQ(doca_argp_init("first", &first), DOCA_SUCCESS);
  EXPECT_EQ(doca_argp_init("again", &first), DOCA_ERROR_BAD_STATE);
  ASSERT_EQ(doca_argp_register_param(make_param({"d", "device", DOCA_ARGP_TYPE_STRING, on_device})),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_argp_start(cl.argc(), cl.argv()), DOCA_SUCCESS);
  EXPECT_EQ(first.device, "sm");
  ASSERT_EQ(doca_argp_destroy(), DOCA_SUCCESS);

  // A fresh parser: the old flags are gone and the new config gets the values.
  ASSERT_EQ(doca_argp_init("second", &second), DOCA_SUCCESS);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(doca_argp_start(cl.argc(), cl.argv()), DOCA_ERROR_NOT_SUPPORTED);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("second: unknown flag '--device'"), std::string::npos) << err;
  ASSERT_EQ(doca_argp_register_param(make_param({"d", "device", DOCA_ARGP_TYPE_STRING, on_device})),
            DOCA_SUCCESS);
  ASSERT_EQ(doca_argp_start(cl.argc(), cl.argv()), DOCA_SUCCESS);
  EXPECT_EQ(second.device, "sm");
  EXPECT_EQ(first.device, "sm");
  ASSERT_EQ(doca_argp_destroy(), DOCA_SUCCESS);
}

}  // namespace
