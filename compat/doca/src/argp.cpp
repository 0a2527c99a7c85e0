// doca_argp.h: DOCA's command-line and JSON-file flag parser, with DOCA's standard flags wired
// to zcstore's logger (-l is the program's level, --sdk-log-level the SDK's).
//
// doca_argp_start() works in steps so that no callback runs for a command line that is wrong
// as a whole: gather every (flag, value) from the JSON file and argv, check repeats and the
// mandatory flags, convert every value to its type, and only then deliver them: the log levels
// first, then the program's flags in order.
#include <doca_argp.h>
#include <doca_log.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "objects.hpp"

struct doca_argp_param {
  std::string short_name;
  std::string long_name;
  std::string arguments;
  std::string description;
  doca_argp_param_cb_t callback = nullptr;
  doca_argp_type type = DOCA_ARGP_TYPE_UNKNOWN;
  bool mandatory = false;
  bool cli_only = false;
  bool multi = false;
};

namespace zc::doca {
namespace {

// The standard flags DOCA's parser adds to every program; their names are reserved.
enum class standard_flag { help, version, log_level, sdk_log_level, json };

struct standard_entry {
  standard_flag flag;
  const char* short_name;  // "" when none
  const char* long_name;
  const char* arguments;
  const char* description;
};

constexpr standard_entry standard_flags[] = {
    {standard_flag::help, "h", "help", "", "Print a help synopsis"},
    {standard_flag::version, "v", "version", "", "Print program version information"},
    {standard_flag::log_level, "l", "log-level", "<num>",
     "Log level of the program: 10=DISABLE, 20=CRITICAL, 30=ERROR, 40=WARNING, 50=INFO, "
     "60=DEBUG, 70=TRACE"},
    {standard_flag::sdk_log_level, "", "sdk-log-level", "<num>",
     "Log level of the SDK (libzcstore-doca and zcstore), same numbers as --log-level"},
    {standard_flag::json, "j", "json", "<path>", "Read the flags from a JSON file"},
};

// A JSON file's top-level sections, as DOCA applications' configuration files have them; a
// file may also list the flags at top level.
constexpr const char* json_general_section = "doca_general_flags";
constexpr const char* json_program_section = "doca_program_flags";
constexpr const char* json_dpdk_section = "doca_dpdk_flags";

// The largest JSON file read. DOCA applications' configuration files are a few KiB.
constexpr uint64_t max_json_file_bytes = 1 << 20;

struct parser_state {
  std::string program_name;
  void* config = nullptr;
  std::vector<std::unique_ptr<doca_argp_param>> params;
  doca_argp_param_cb_t version_callback = nullptr;
  doca_argp_validation_cb_t validation_callback = nullptr;
  doca_argp_dpdk_cb_t dpdk_callback = nullptr;
  std::vector<std::string> dpdk_args;  // alive until destroy, as DOCA keeps them
  std::vector<char*> dpdk_argv;
  // doca_argp_start() is running: a callback that destroyed the parser would pull it from under
  // the parse, and one that started it again would recurse without end.
  bool running = false;
};

// One parser per process, as DOCA has it. Null when not initialized.
std::unique_ptr<parser_state>& state() {
  static std::unique_ptr<parser_state> s;
  return s;
}

// A JSON file's document. Ordered, so that its flags are delivered in file order, as DOCA's
// json-c parser delivers them.
using json_document = nlohmann::ordered_json;

// What a flag's value is, before conversion: text from argv, or a JSON value from a file.
struct found_value {
  const standard_entry* standard = nullptr;  // either this...
  doca_argp_param* param = nullptr;          // ...or this
  std::string spelled;                       // "--device" / "-d" / "device (JSON)" for messages
  std::optional<std::string> text;           // argv; empty optional: a boolean given bare
  // JSON file: points into the document parse() holds. Never a copy: copying a value is
  // recursive, and a deeply nested one would overflow the stack.
  const json_document* json = nullptr;
};

// A user mistake: the message goes to stderr with the usage, and the code is returned.
struct usage_error {
  doca_error_t code;
  std::string message;
};

void print_usage(std::FILE* out, const parser_state& s) {
  auto names = [](const std::string& short_name, const std::string& long_name,
                  const std::string& arguments) {
    std::string text;
    if (!short_name.empty()) text += "-" + short_name;
    if (!long_name.empty()) text += (text.empty() ? "--" : ", --") + long_name;
    if (!arguments.empty()) text += " " + arguments;
    return text;
  };
  // One column for the names, as wide as the widest, so the descriptions line up.
  size_t width = 0;
  for (const auto& f : standard_flags)
    width = std::max(width, names(f.short_name, f.long_name, f.arguments).size());
  for (const auto& p : s.params)
    width = std::max(width, names(p->short_name, p->long_name, p->arguments).size());
  auto line = [&](const std::string& flag_names, const std::string& description) {
    std::fprintf(out, "  %-*s  %s\n", static_cast<int>(width), flag_names.c_str(),
                 description.c_str());
  };
  std::fprintf(out, "Usage: %s [DOCA Flags] [Program Flags]\n\nDOCA Flags:\n",
               s.program_name.c_str());
  for (const auto& f : standard_flags)
    line(names(f.short_name, f.long_name, f.arguments), f.description);
  if (!s.params.empty()) std::fprintf(out, "\nProgram Flags:\n");
  for (const auto& p : s.params) {
    std::string description = p->description;
    if (p->mandatory) description += " (mandatory)";
    if (p->multi) description += " (may be repeated)";
    line(names(p->short_name, p->long_name, p->arguments), description);
  }
  std::fflush(out);
}

const standard_entry* find_standard(const std::string& name, bool is_long) {
  for (const auto& f : standard_flags)
    if (!name.empty() && name == (is_long ? f.long_name : f.short_name)) return &f;
  return nullptr;
}

doca_argp_param* find_param(const parser_state& s, const std::string& name, bool is_long) {
  for (const auto& p : s.params)
    if (!name.empty() && name == (is_long ? p->long_name : p->short_name)) return p.get();
  return nullptr;
}

bool takes_value(const found_value& v) {
  return v.standard ? v.standard->arguments[0] != '\0' : v.param->type != DOCA_ARGP_TYPE_BOOLEAN;
}

// Reads the flags of argv[first..last). -h and -v act at once, as DOCA's do.
void gather_argv(parser_state& s, int first, int last, char** argv,
                 std::vector<found_value>& found) {
  for (int i = first; i < last; ++i) {
    const std::string arg = argv[i] ? argv[i] : "";
    const bool is_long = arg.rfind("--", 0) == 0 && arg.size() > 2;
    const bool is_short = !is_long && arg.size() > 1 && arg[0] == '-' && arg[1] != '-';
    if (!is_long && !is_short)
      throw usage_error{DOCA_ERROR_INVALID_VALUE, "unexpected argument '" + arg + "'"};
    const std::string body = arg.substr(is_long ? 2 : 1);
    const auto eq = body.find('=');
    const std::string name = body.substr(0, eq);
    found_value v;
    v.spelled = (is_long ? "--" : "-") + name;
    v.standard = find_standard(name, is_long);
    if (!v.standard) v.param = find_param(s, name, is_long);
    if (!v.standard && !v.param)
      throw usage_error{DOCA_ERROR_NOT_SUPPORTED, "unknown flag '" + v.spelled + "'"};
    if (eq != std::string::npos) {
      v.text = body.substr(eq + 1);
    } else if (takes_value(v)) {
      if (i + 1 >= last)
        throw usage_error{DOCA_ERROR_INVALID_VALUE, "flag '" + v.spelled + "' needs a value"};
      v.text = argv[++i] ? argv[i] : "";
    }
    if (v.standard && v.standard->flag == standard_flag::help) {
      print_usage(stdout, s);
      std::exit(EXIT_SUCCESS);
    }
    if (v.standard && v.standard->flag == standard_flag::version) {
      if (s.version_callback) {
        const doca_error_t result = s.version_callback(nullptr, s.config);
        if (result == DOCA_SUCCESS) std::exit(EXIT_SUCCESS);
        std::fprintf(stderr, "%s: the version callback failed: %s\n", s.program_name.c_str(),
                     doca_error_get_descr(result));
        std::exit(EXIT_FAILURE);
      }
      std::printf("%s\nDOCA API version: %s (libzcstore-doca, zcstore %s)\n",
                  s.program_name.c_str(), ZC_DOCA_API_VERSION_STRING, ZC_VERSION_STRING);
      std::fflush(stdout);
      std::exit(EXIT_SUCCESS);
    }
    found.push_back(std::move(v));
  }
}

// Reads a JSON file. Only a regular file of at most max_json_file_bytes is read: /dev/zero would
// be read until memory ran out, and a FIFO would block the program until someone wrote to it.
// The file is opened without blocking (a FIFO's open waits for a writer), then checked.
json_document read_json_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw usage_error{DOCA_ERROR_IO_FAILED, "cannot open JSON file '" + path + "'"};
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(::fdopen(fd, "r"), &std::fclose);
  if (!file) {
    ::close(fd);
    throw usage_error{DOCA_ERROR_IO_FAILED, "cannot open JSON file '" + path + "'"};
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw usage_error{DOCA_ERROR_IO_FAILED, "JSON file '" + path + "' is not a regular file"};
  if (static_cast<uint64_t>(st.st_size) > max_json_file_bytes)
    throw usage_error{DOCA_ERROR_IO_FAILED, "JSON file '" + path + "' is larger than " +
                                                std::to_string(max_json_file_bytes) + " bytes"};
  // A key given twice in one object would silently keep the last value: refused, as a flag
  // given twice on the command line is. One set of keys per open object.
  std::vector<std::set<std::string>> open_objects;
  std::optional<std::string> repeated_key;
  const auto watch_keys = [&](int, json_document::parse_event_t event, json_document& parsed) {
    using event_t = json_document::parse_event_t;
    if (event == event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == event_t::object_end) {
      open_objects.pop_back();
    } else if (event == event_t::key && !repeated_key && !open_objects.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) repeated_key = key;
    }
    return true;
  };
  auto doc = json_document::parse(file.get(), watch_keys, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    throw usage_error{DOCA_ERROR_IO_FAILED, "JSON file '" + path + "' is not valid JSON"};
  if (repeated_key)
    throw usage_error{DOCA_ERROR_INVALID_VALUE,
                      "JSON file '" + path + "' has key '" + *repeated_key + "' twice"};
  if (!doc.is_object())
    throw usage_error{DOCA_ERROR_INVALID_VALUE, "JSON file '" + path + "' is not an object"};
  return doc;
}

void gather_json_entry(const parser_state& s, const std::string& key, const json_document& value,
                       std::vector<found_value>& found) {
  found_value v;
  v.spelled = "'" + key + "' (JSON)";
  v.standard = find_standard(key, /*is_long=*/true);
  // Only the log levels make sense in a file: help, version and json are command-line acts.
  if (v.standard && v.standard->flag != standard_flag::log_level &&
      v.standard->flag != standard_flag::sdk_log_level)
    v.standard = nullptr;
  else if (!v.standard)
    v.param = find_param(s, key, /*is_long=*/true);
  if (!v.standard && !v.param)
    throw usage_error{DOCA_ERROR_NOT_SUPPORTED, "unknown JSON key '" + key + "'"};
  if (v.param && v.param->cli_only)
    throw usage_error{DOCA_ERROR_NOT_SUPPORTED,
                      "flag '" + key + "' is accepted on the command line only"};
  if (v.param && v.param->multi) {
    if (!value.is_array())
      throw usage_error{DOCA_ERROR_INVALID_VALUE, "JSON key '" + key + "' needs an array"};
    for (const auto& element : value) {
      found_value one = v;
      one.json = &element;
      found.push_back(std::move(one));
    }
    return;
  }
  v.json = &value;
  found.push_back(std::move(v));
}

// Gathers the flags of a JSON file's document; `found` points into `doc`.
void gather_json(const parser_state& s, const json_document& doc, std::vector<found_value>& found) {
  for (const auto& [key, value] : doc.items()) {
    if (key == json_dpdk_section) {
      if (!value.empty())
        throw usage_error{DOCA_ERROR_NOT_SUPPORTED, std::string("JSON section '") +
                                                        json_dpdk_section +
                                                        "' is not supported by libzcstore-doca"};
    } else if (key == json_general_section || key == json_program_section) {
      if (!value.is_object())
        throw usage_error{DOCA_ERROR_INVALID_VALUE, "JSON section '" + key + "' is not an object"};
      for (const auto& [inner_key, inner_value] : value.items())
        gather_json_entry(s, inner_key, inner_value, found);
    } else {
      gather_json_entry(s, key, value, found);
    }
  }
}

int to_int(const found_value& v) {
  if (v.json) {
    const json_document& j = *v.json;
    if (!j.is_number_integer())
      throw usage_error{DOCA_ERROR_INVALID_VALUE, v.spelled + " needs an integer"};
    // nlohmann stores a non-negative integer unsigned, so a signed one is negative.
    if (j.is_number_unsigned() ? j.get<uint64_t>() > INT32_MAX : j.get<int64_t>() < INT32_MIN)
      throw usage_error{DOCA_ERROR_INVALID_VALUE, v.spelled + " is out of range"};
    return static_cast<int>(j.get<int64_t>());
  }
  // Decimal digits with an optional '-', the whole text: no spaces, no '+', no "0x", and "010"
  // is ten, not eight.
  const std::string& text = *v.text;
  int n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc{} || end != text.data() + text.size())
    throw usage_error{DOCA_ERROR_INVALID_VALUE,
                      "flag '" + v.spelled + "' needs an integer, not '" + text + "'"};
  return n;
}

bool to_bool(const found_value& v) {
  if (v.json) {
    if (!v.json->is_boolean())
      throw usage_error{DOCA_ERROR_INVALID_VALUE, v.spelled + " needs true or false"};
    return v.json->get<bool>();
  }
  if (!v.text) return true;  // a bare boolean flag
  if (*v.text == "true") return true;
  if (*v.text == "false") return false;
  throw usage_error{DOCA_ERROR_INVALID_VALUE,
                    "flag '" + v.spelled + "' takes no value, or true or false"};
}

std::string to_string(const found_value& v) {
  if (v.json) {
    if (!v.json->is_string())
      throw usage_error{DOCA_ERROR_INVALID_VALUE, v.spelled + " needs a string"};
    return v.json->get<std::string>();
  }
  return *v.text;
}

// A value converted to its flag's type, ready to hand over.
struct ready_value {
  const found_value* from = nullptr;
  std::string text;
  int number = 0;
  bool yes = false;
};

ready_value convert(const found_value& v) {
  ready_value r;
  r.from = &v;
  if (v.standard) {  // the log levels
    r.number = to_int(v);
    if (!zc::log::level_from_int(r.number))
      throw usage_error{DOCA_ERROR_INVALID_VALUE,
                        std::string(v.standard->flag == standard_flag::log_level ? "" : "SDK ") +
                            "log level " + std::to_string(r.number) +
                            " is not one of 10, 20, ..., 70"};
    return r;
  }
  switch (v.param->type) {
    case DOCA_ARGP_TYPE_STRING:
      r.text = to_string(v);
      break;
    case DOCA_ARGP_TYPE_INT:
      r.number = to_int(v);
      break;
    case DOCA_ARGP_TYPE_BOOLEAN:
      r.yes = to_bool(v);
      break;
    default:
      break;  // refused at registration
  }
  return r;
}

// Runs a flag's callback (or sets a log level); a callback's error is returned as it is (the
// program chose it).
doca_error_t deliver(parser_state& s, ready_value& r) {
  const found_value& v = *r.from;
  if (v.standard) {
    if (v.standard->flag == standard_flag::log_level) {
      if (auto e = doca_log_level_set_global_lower_limit(static_cast<uint32_t>(r.number));
          e != DOCA_SUCCESS)
        return e;
    } else {
      zc::log::set_level(zc::log::source::sdk, *zc::log::level_from_int(r.number));
    }
    return DOCA_SUCCESS;
  }
  void* value = nullptr;
  switch (v.param->type) {
    case DOCA_ARGP_TYPE_STRING:
      value = r.text.data();
      break;
    case DOCA_ARGP_TYPE_INT:
      value = &r.number;
      break;
    case DOCA_ARGP_TYPE_BOOLEAN:
      value = &r.yes;
      break;
    default:
      return DOCA_ERROR_NOT_SUPPORTED;
  }
  const doca_error_t result = v.param->callback(value, s.config);
  if (result != DOCA_SUCCESS)
    std::fprintf(stderr, "%s: the callback of flag %s failed: %s\n", s.program_name.c_str(),
                 v.spelled.c_str(), doca_error_get_descr(result));
  return result;
}

// Delivers every value in order, then runs the validation callback; stops at the first error.
doca_error_t deliver_all(parser_state& s, std::vector<ready_value>& ready) {
  for (auto& r : ready)
    if (auto e = deliver(s, r); e != DOCA_SUCCESS) return e;
  if (s.validation_callback) {
    if (auto r = s.validation_callback(s.config); r != DOCA_SUCCESS) {
      std::fprintf(stderr, "%s: the program's validation failed: %s\n", s.program_name.c_str(),
                   doca_error_get_descr(r));
      return r;
    }
  }
  return DOCA_SUCCESS;
}

doca_error_t parse(parser_state& s, int argc, char** argv) {
  int first = 1;
  if (s.dpdk_callback) {
    // DOCA's layout for DPDK programs: `program [DPDK flags] -- [DOCA and program flags]`.
    int split = 0;
    for (int i = 1; i < argc && split == 0; ++i)
      if (argv[i] && std::string(argv[i]) == "--") split = i;
    s.dpdk_args.assign(1, argv[0] ? argv[0] : "");
    for (int i = 1; i < split; ++i) s.dpdk_args.emplace_back(argv[i] ? argv[i] : "");
    s.dpdk_argv.clear();
    for (auto& a : s.dpdk_args) s.dpdk_argv.push_back(a.data());
    s.dpdk_argv.push_back(nullptr);
    if (auto r = s.dpdk_callback(static_cast<int>(s.dpdk_args.size()), s.dpdk_argv.data());
        r != DOCA_SUCCESS)
      return r;
    if (split != 0) first = split + 1;
  }

  std::vector<found_value> from_argv;
  gather_argv(s, first, argc, argv, from_argv);
  std::vector<found_value> found;
  std::vector<found_value> rest;
  std::optional<std::string> json_path;
  for (auto& v : from_argv) {
    if (v.standard && v.standard->flag == standard_flag::json) {
      if (json_path)
        throw usage_error{DOCA_ERROR_INVALID_VALUE, "flag '" + v.spelled + "' given twice"};
      json_path = *v.text;
    } else {
      rest.push_back(std::move(v));
    }
  }
  // The file's values come first, so that a flag given in both places is caught below.
  json_document doc;  // alive until every value was delivered: `found` points into it
  if (json_path) {
    doc = read_json_file(*json_path);
    gather_json(s, doc, found);
  }
  for (auto& v : rest) found.push_back(std::move(v));

  std::set<const void*> seen;
  for (const auto& v : found) {
    const void* id = v.standard ? static_cast<const void*>(v.standard) : v.param;
    const bool multi = v.param && v.param->multi;
    if (!seen.insert(id).second && !multi)
      throw usage_error{DOCA_ERROR_INVALID_VALUE, "flag " + v.spelled + " given twice"};
  }
  for (const auto& p : s.params)
    if (p->mandatory && !seen.count(p.get()))
      throw usage_error{DOCA_ERROR_INVALID_VALUE,
                        "missing mandatory flag '" +
                            (p->long_name.empty() ? "-" + p->short_name : "--" + p->long_name) +
                            "'"};

  std::vector<ready_value> ready;
  for (const auto& v : found) ready.push_back(convert(v));
  // The standard flags (the log levels) first, so that the program's callbacks log at the
  // level asked for wherever -l stands.
  std::stable_partition(ready.begin(), ready.end(),
                        [](const ready_value& r) { return r.from->standard != nullptr; });
  const auto app_level = zc::log::get_level(zc::log::source::app);
  const auto sdk_level = zc::log::get_level(zc::log::source::sdk);
  const doca_error_t result = deliver_all(s, ready);
  if (result != DOCA_SUCCESS) {
    // A start that fails leaves the log levels as it found them.
    zc::log::set_level(zc::log::source::app, app_level);
    zc::log::set_level(zc::log::source::sdk, sdk_level);
  }
  return result;
}

bool name_taken(const parser_state& s, const doca_argp_param& p) {
  return find_standard(p.short_name, false) || find_standard(p.long_name, true) ||
         find_param(s, p.short_name, false) || find_param(s, p.long_name, true);
}

// Sets one of the parser's program-wide callbacks (version, validation).
template <typename Callback>
doca_error_t register_callback(Callback parser_state::*slot, Callback callback) noexcept {
  auto& s = state();
  if (callback == nullptr) return DOCA_ERROR_INVALID_VALUE;
  if (!s) return DOCA_ERROR_BAD_STATE;
  (*s).*slot = callback;
  return DOCA_SUCCESS;
}

// The setters return nothing (DOCA's signatures): a failure can only be logged.
template <typename Body>
void setter(const char* function, doca_argp_param* param, Body&& body) noexcept {
  if (param == nullptr) {
    ZC_SDK_LOG_ERROR("{}: NULL param", function);
    return;
  }
  guarded(function, [&] {
    body(*param);
    return DOCA_SUCCESS;
  });
}

}  // namespace
}  // namespace zc::doca

using zc::doca::guarded;

extern "C" {

void doca_argp_usage(void) {
  if (auto& s = zc::doca::state()) {
    try {
      zc::doca::print_usage(stdout, *s);
    } catch (...) {
    }
  }
  std::exit(EXIT_SUCCESS);
}

doca_error_t doca_argp_init(const char* program_name, void* program_config) {
  if (program_name == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    auto& s = zc::doca::state();
    if (s) return DOCA_ERROR_BAD_STATE;  // running or not: there is a parser
    auto fresh = std::make_unique<zc::doca::parser_state>();
    fresh->program_name = program_name;
    fresh->config = program_config;
    s = std::move(fresh);
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_argp_register_param(struct doca_argp_param* input_param) {
  if (input_param == nullptr) return DOCA_ERROR_INVALID_VALUE;
  std::unique_ptr<doca_argp_param> param(input_param);  // ours in every case, as DOCA says
  const char* function = __func__;
  return guarded(function, [&] {
    auto& s = zc::doca::state();
    if (!s) return DOCA_ERROR_BAD_STATE;
    if ((param->short_name.empty() && param->long_name.empty()) || param->description.empty() ||
        param->callback == nullptr || param->type == DOCA_ARGP_TYPE_UNKNOWN) {
      ZC_SDK_LOG_ERROR("{}: a param needs a name, a description, a callback and a type", function);
      return DOCA_ERROR_INITIALIZATION;
    }
    if (param->type == DOCA_ARGP_TYPE_JSON_OBJ) return zc::doca::not_supported(function);
    if (param->type != DOCA_ARGP_TYPE_STRING && param->type != DOCA_ARGP_TYPE_INT &&
        param->type != DOCA_ARGP_TYPE_BOOLEAN)
      return DOCA_ERROR_INVALID_VALUE;
    if (zc::doca::name_taken(*s, *param)) {
      ZC_SDK_LOG_ERROR("{}: flag -{} / --{}: a name is already taken", function, param->short_name,
                       param->long_name);
      return DOCA_ERROR_INVALID_VALUE;
    }
    s->params.push_back(std::move(param));
    return DOCA_SUCCESS;
  });
}

doca_error_t doca_argp_register_version_callback(doca_argp_param_cb_t callback) {
  return zc::doca::register_callback(&zc::doca::parser_state::version_callback, callback);
}

doca_error_t doca_argp_register_validation_callback(doca_argp_validation_cb_t callback) {
  return zc::doca::register_callback(&zc::doca::parser_state::validation_callback, callback);
}

doca_error_t doca_argp_start(int argc, char** argv) {
  if (argc < 1 || argv == nullptr) return DOCA_ERROR_INVALID_VALUE;
  auto& s = zc::doca::state();
  if (!s || s->running) return DOCA_ERROR_BAD_STATE;
  s->running = true;
  struct not_running_on_exit {
    zc::doca::parser_state& s;
    ~not_running_on_exit() { s.running = false; }
  } guard{*s};
  return guarded(__func__, [&] {
    try {
      return zc::doca::parse(*s, argc, argv);
    } catch (const zc::doca::usage_error& e) {
      std::fprintf(stderr, "%s: %s\n\n", s->program_name.c_str(), e.message.c_str());
      zc::doca::print_usage(stderr, *s);
      return e.code;
    }
  });
}

doca_error_t doca_argp_destroy(void) {
  auto& s = zc::doca::state();
  if (!s || s->running) return DOCA_ERROR_BAD_STATE;
  s.reset();
  return DOCA_SUCCESS;
}

void doca_argp_set_dpdk_program(doca_argp_dpdk_cb_t callback) {
  if (auto& s = zc::doca::state())
    s->dpdk_callback = callback;
  else
    ZC_SDK_LOG_ERROR("{}: doca_argp_init() was not called", __func__);
}

doca_error_t doca_argp_param_create(struct doca_argp_param** param) {
  if (param == nullptr) return DOCA_ERROR_INVALID_VALUE;
  return guarded(__func__, [&] {
    *param = new doca_argp_param;
    return DOCA_SUCCESS;
  });
}

void doca_argp_param_set_short_name(struct doca_argp_param* param, const char* name) {
  zc::doca::setter(__func__, param, [&](doca_argp_param& p) { p.short_name = name ? name : ""; });
}

void doca_argp_param_set_long_name(struct doca_argp_param* param, const char* name) {
  zc::doca::setter(__func__, param, [&](doca_argp_param& p) { p.long_name = name ? name : ""; });
}

void doca_argp_param_set_arguments(struct doca_argp_param* param, const char* arguments) {
  zc::doca::setter(__func__, param,
                   [&](doca_argp_param& p) { p.arguments = arguments ? arguments : ""; });
}

void doca_argp_param_set_description(struct doca_argp_param* param, const char* description) {
  zc::doca::setter(__func__, param,
                   [&](doca_argp_param& p) { p.description = description ? description : ""; });
}

void doca_argp_param_set_callback(struct doca_argp_param* param, doca_argp_param_cb_t callback) {
  zc::doca::setter(__func__, param, [&](doca_argp_param& p) { p.callback = callback; });
}

void doca_argp_param_set_type(struct doca_argp_param* param, enum doca_argp_type type) {
  zc::doca::setter(__func__, param, [&](doca_argp_param& p) { p.type = type; });
}

void doca_argp_param_set_mandatory(struct doca_argp_param* param) {
  zc::doca::setter(__func__, param, [](doca_argp_param& p) { p.mandatory = true; });
}

void doca_argp_param_set_cli_only(struct doca_argp_param* param) {
  zc::doca::setter(__func__, param, [](doca_argp_param& p) { p.cli_only = true; });
}

void doca_argp_param_set_multiplicity(struct doca_argp_param* param) {
  zc::doca::setter(__func__, param, [](doca_argp_param& p) { p.multi = true; });
}

doca_error_t doca_argp_param_destroy(struct doca_argp_param* param) {
  if (param == nullptr) return DOCA_ERROR_INVALID_VALUE;
  delete param;
  return DOCA_SUCCESS;
}

// The flags set zcstore's levels and nothing else, so the levels are the one record of them.
doca_error_t doca_argp_get_log_level(int* log_level) {
  if (log_level == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *log_level = static_cast<int>(zc::log::get_level(zc::log::source::app));
  return DOCA_SUCCESS;
}

doca_error_t doca_argp_get_sdk_log_level(int* log_level) {
  if (log_level == nullptr) return DOCA_ERROR_INVALID_VALUE;
  *log_level = static_cast<int>(zc::log::get_level(zc::log::source::sdk));
  return DOCA_SUCCESS;
}

}  // extern "C"
