#include "core/cli.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/device.hpp"
#include "core/log.hpp"
#include "core/status.hpp"

#ifndef ZC_VERSION
#define ZC_VERSION "0.1.0"
#endif

namespace zc::core {
namespace {

const CLI::Validator log_level_check(
    [](std::string& value) -> std::string {
      try {
        size_t used = 0;
        int level = std::stoi(value, &used);
        if (used == value.size() && log::level_from_int(level)) return {};
      } catch (...) {
      }
      return "log level must be one of 10 (disable), 20, 30, 40, 50, 60, 70 (trace)";
    },
    "LEVEL");

std::string scalar_to_word(const nlohmann::json& value, const std::string& key) {
  if (value.is_string()) return value.get<std::string>();
  // Unsigned first: is_number_integer() is also true for unsigned values above INT64_MAX.
  if (value.is_number_unsigned()) return std::to_string(value.get<unsigned long long>());
  if (value.is_number_integer()) return std::to_string(value.get<long long>());
  if (value.is_number_float()) return fmt::format("{}", value.get<double>());
  throw status_error(status::invalid_value,
                     fmt::format("JSON key \"{}\" must hold a string, a number or a list", key));
}

}  // namespace

cli::cli(std::string program_name, std::string description)
    : program_name_(std::move(program_name)),
      app_(std::make_unique<CLI::App>(std::move(description), program_name_)) {
  // JSON words go first and the command line after them, so an option may appear twice; the
  // last one (the command line's) wins instead of CLI11's default error.
  app_->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app_->set_version_flag("-v,--version", std::string(ZC_VERSION));
  app_->add_option("-l,--log-level", log_level_,
                   "Application log level: 10 disable, 20 critical, 30 error, 40 warning, "
                   "50 info, 60 debug, 70 trace")
      ->check(log_level_check)
      ->capture_default_str();
  app_->add_option("--sdk-log-level", sdk_log_level_, "Library log level, same numbers")
      ->check(log_level_check)
      ->capture_default_str();
  app_->add_option("-j,--json", json_file_, "Read flags from a JSON file (command line wins)");
  app_->add_option("--poll-mode", poll_mode_, "busy | adaptive | event")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, poll_mode>{{"busy", poll_mode::busy},
                                           {"adaptive", poll_mode::adaptive},
                                           {"event", poll_mode::event}},
          CLI::ignore_case))
      ->option_text("busy|adaptive|event (default: adaptive)");
}

cli::~cli() = default;

std::vector<std::string> cli::json_to_args(const std::string& json_text) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    throw status_error(status::invalid_value, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!doc.is_object()) throw status_error(status::invalid_value, "JSON config must be an object");
  std::vector<std::string> words;
  for (const auto& [raw_key, value] : doc.items()) {
    std::string key = raw_key.rfind("-", 0) == 0 ? raw_key : "--" + raw_key;
    if (value.is_boolean()) {
      if (value.get<bool>()) words.push_back(key);
    } else if (value.is_array()) {
      for (const auto& item : value) {
        words.push_back(key);
        words.push_back(scalar_to_word(item, raw_key));
      }
    } else {
      words.push_back(key);
      words.push_back(scalar_to_word(value, raw_key));
    }
  }
  return words;
}

// A JSON key whose option is also on the command line is dropped, so that a list given on the
// command line (--cpu 2) replaces the file's list rather than adding to it.
std::string cli::without_command_line_keys(const std::string& json_text, int argc,
                                           const char* const* argv) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error&) {
    return json_text;  // json_to_args reports it
  }
  if (!doc.is_object()) return json_text;
  std::set<const CLI::Option*> given;
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word.size() < 2 || word[0] != '-') continue;
    word = word.substr(0, word.find('='));
    if (const CLI::Option* opt = app_->get_option_no_throw(word)) given.insert(opt);
  }
  for (auto it = doc.begin(); it != doc.end();) {
    std::string key = it.key().rfind("-", 0) == 0 ? it.key() : "--" + it.key();
    const CLI::Option* opt = app_->get_option_no_throw(key);
    if (opt != nullptr && given.count(opt)) {
      it = doc.erase(it);
    } else {
      ++it;
    }
  }
  return doc.dump();
}

std::optional<int> cli::parse(int argc, const char* const* argv) {
  std::vector<std::string> words;
  // Find -j/--json first: its contents go in front so the command line overrides them.
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    std::string_view word = argv[i];
    if ((word == "-j" || word == "--json") && i + 1 < argc) json_path = argv[i + 1];
    if (word.rfind("--json=", 0) == 0) json_path = std::string(word.substr(7));
    if (word.size() > 2 && word.rfind("-j", 0) == 0) json_path = std::string(word.substr(2));
  }
  try {
    if (!json_path.empty()) {
      std::ifstream in(json_path);
      if (!in) {
        std::cerr << program_name_ << ": cannot read JSON config file: " << json_path << "\n";
        return exit_bad_usage;
      }
      std::stringstream text;
      text << in.rdbuf();
      words = json_to_args(without_command_line_keys(text.str(), argc, argv));
    }
  } catch (const status_error& e) {
    std::cerr << program_name_ << ": " << json_path << ": " << e.what() << "\n";
    return exit_bad_usage;
  }
  for (int i = 1; i < argc; ++i) words.emplace_back(argv[i]);

  try {
    // CLI11 takes the words in reverse order.
    std::vector<std::string> reversed(words.rbegin(), words.rend());
    app_->parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      app_->exit(e);
      return 0;
    }
    std::cerr << program_name_ << ": " << e.what() << " (see --help)\n";
    return exit_bad_usage;
  }
  log::set_level(log::source::app, *log::level_from_int(log_level_));
  log::set_level(log::source::sdk, *log::level_from_int(sdk_log_level_));
  return std::nullopt;
}

std::optional<int> cli::check_device(const std::string& spec) const {
  try {
    (void)device::open(spec);
  } catch (const status_error& e) {
    std::cerr << program_name_ << ": " << e.what() << "\n";
    return exit_bad_usage;
  }
  return std::nullopt;
}

void print_banner(std::string_view program, std::string_view version) {
  std::printf("%.*s: v%.*s\n", static_cast<int>(program.size()), program.data(),
              static_cast<int>(version.size()), version.data());
  std::fflush(stdout);
}

int run_guarded(std::string_view program, const std::function<int()>& body,
                const std::function<int(status)>& on_failure) {
  status code = status::unknown;
  try {
    return body();
  } catch (const status_error& e) {
    code = e.code();
    std::fprintf(stderr, "%.*s: %s (%s)\n", static_cast<int>(program.size()), program.data(),
                 e.what(), status_name(e.code()).data());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%.*s: %s\n", static_cast<int>(program.size()), program.data(), e.what());
  }
  std::fflush(stderr);
  return on_failure ? on_failure(code) : 1;
}

CLI::Validator off_or_at_least(uint64_t minimum) {
  return CLI::Validator(
      [minimum](std::string& value) -> std::string {
        uint64_t n = 0;
        if (!CLI::detail::lexical_cast(value, n) || (n != 0 && n < minimum))
          return "must be 0 (off) or at least " + std::to_string(minimum);
        return {};
      },
      "0|>=" + std::to_string(minimum));
}

}  // namespace zc::core
