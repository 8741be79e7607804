#include "config/flag_table.h"

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <sstream>

#include <toml++/toml.h>
#include <nlohmann/json.hpp>

#include "util/env.h"
#include "util/error.h"
#include "util/json_text.h"

namespace ddptrain {
namespace {

std::string format_double(double v) {
  std::ostringstream os;
  os << std::setprecision(std::numeric_limits<double>::max_digits10 - 2) << v;
  return os.str();
}

bool parse_bool(const std::string& s, bool* out) {
  if (s == "true" || s == "1" || s == "yes" || s == "on") return *out = true, true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return *out = false, true;
  return false;
}

// `what` describes the unknown item for the message; `name` is compared with the table.
[[noreturn]] void unknown_flag(const std::vector<Flag>& table, const std::string& name,
                               const std::string& what) {
  // Suggest the closest flag by shared prefix, which catches most typos cheaply.
  std::string best;
  size_t best_len = 0;
  for (const auto& f : table) {
    size_t n = 0;
    while (n < f.name.size() && n < name.size() && f.name[n] == name[n]) ++n;
    if (n > best_len) best_len = n, best = f.name;
  }
  std::string hint = best_len >= 3 ? "; did you mean --" + best + "?" : "; see --help";
  throw UsageError(detail::concat("unknown ", what, hint));
}

// The flag's current value as TOML would spell it.
std::string quoted(const Flag& f) {
  const std::string v = f.get();
  return f.type == FlagType::kString || (f.type == FlagType::kDoubleOrAuto && v == "auto") ? "\"" + v + "\""
                                                                                           : v;
}

}  // namespace

const Flag* find_flag(const std::vector<Flag>& table, const std::string& name) {
  for (const auto& f : table)
    if (f.name == name) return &f;
  return nullptr;
}

Flag bind_flag(const std::string& name, bool* field, const std::string& help) {
  return {name,
          FlagType::kBool,
          help,
          [=](const std::string& v) {
            DDP_USAGE_CHECK(parse_bool(v, field), "--", name, "='", v, "' is not a boolean; use --", name,
                            " or --no-", name);
          },
          [=] { return std::string(*field ? "true" : "false"); },
          field};
}

namespace detail {

Flag integer_flag(const std::string& name, const std::string& help, long long min, long long max,
                  std::function<void(long long)> set, std::function<long long()> get, const void* field) {
  return {name,
          FlagType::kInt,
          help,
          [=](const std::string& v) {
            long long x = 0;
            DDP_USAGE_CHECK(env::parse_int(v, &x), "--", name, "='", v,
                            "' is not an integer; pass a whole number, e.g. --", name, " ", get());
            DDP_USAGE_CHECK(x >= min && x <= max, "--", name, "=", v, " is out of range: it must be in [",
                            min, ", ", max, "]; pass e.g. --", name, " ", get());
            set(x);
          },
          [=] { return std::to_string(get()); },
          field};
}

}  // namespace detail

Flag bind_flag(const std::string& name, double* field, const std::string& help) {
  return {name,
          FlagType::kDouble,
          help,
          [=](const std::string& v) {
            DDP_USAGE_CHECK(env::parse_double(v, field), "--", name, "='", v,
                            "' is not a number; pass e.g. --", name, " ", format_double(*field));
          },
          [=] { return format_double(*field); },
          field};
}

Flag bind_flag(const std::string& name, std::string* field, const std::string& help) {
  return {name,
          FlagType::kString,
          help,
          [=](const std::string& v) {
            // config.json and every checkpoint record the flags in JSON, which holds UTF-8 only.
            if (const auto at = first_invalid_utf8(v)) {
              char byte[8];
              std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned char>(v[*at]));
              throw UsageError(detail::concat("--", name, ": the value is not UTF-8 (byte ", byte,
                                              " at offset ", *at,
                                              "); ddptrain records its flags in JSON (config.json, each "
                                              "checkpoint): name the file by a UTF-8 name (a symbolic link "
                                              "will do)"));
            }
            *field = v;
          },
          [=] { return *field; },
          field};
}

Flag bind_flag(const std::string& name, std::optional<double>* field, const std::string& help) {
  return {name,
          FlagType::kDoubleOrAuto,
          help,
          [=](const std::string& v) {
            double x = 0;
            if (v == "auto") {
              field->reset();
              return;
            }
            DDP_USAGE_CHECK(env::parse_double(v, &x), "--", name, "='", v,
                            "' is not a number; pass auto or e.g. --", name, " 25");
            *field = x;
          },
          [=] { return *field ? format_double(**field) : std::string("auto"); },
          field};
}

std::string in_flag_words(const OptionError& e, const std::vector<Flag>& table, const void* bound) {
  return e.spelled([&](const OptionField& f, const std::string* value) {
    // The same member of `bound` as f is of e.base(): the same offset into the same struct.
    const void* address = f.address;
    if (bound && e.base())
      address = static_cast<const char*>(bound) +
                (static_cast<const char*>(f.address) - static_cast<const char*>(e.base()));
    for (const Flag& flag : table)
      if (flag.field == address) return "--" + flag.name + (value ? " " + *value : "");
    return e.qualified(f) + (value ? " = " + *value : "");
  });
}

bool wants_help(const std::vector<std::string>& args) {
  return std::any_of(args.begin(), args.end(),
                     [](const std::string& a) { return a == "--help" || a == "-h"; });
}

std::vector<std::string> parse_flags(const std::vector<Flag>& table, const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      positional.push_back(a);
      continue;
    }
    std::string name = a.substr(2);
    std::string value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Flag* f = find_flag(table, name);
    if (f == nullptr && !has_value && name.rfind("no-", 0) == 0) {
      const Flag* neg = find_flag(table, name.substr(3));
      if (neg != nullptr && neg->type == FlagType::kBool) {
        neg->set("false");
        continue;
      }
    }
    if (f == nullptr) unknown_flag(table, name, "option '--" + name + "'");
    if (f->type == FlagType::kBool && !has_value) {
      f->set("true");
      continue;
    }
    if (!has_value) {
      DDP_USAGE_CHECK(i + 1 < args.size(), "--", name, " needs a value; e.g. --", name, " ", f->get());
      value = args[++i];
    }
    f->set(value);
  }
  return positional;
}

void apply_toml_file(const std::vector<Flag>& table, const std::string& path) {
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << e.description();
    if (e.source().begin.line != 0) os << " (line " << e.source().begin.line << ")";
    throw UsageError(detail::concat("--config='", path, "' could not be read as TOML: ", os.str(),
                                    "; check that the file exists and is valid TOML"));
  }
  for (const auto& [key, node] : doc) {
    std::string name(key.str());
    DDP_USAGE_CHECK(!node.is_table(), "[", name, "] in ", path,
                    " is a TOML table: the config file is flat, one top-level key per flag (e.g. lr = 0.1); ",
                    "move its keys above every [section] and drop the header");
    DDP_USAGE_CHECK(!node.is_array(), "config key '", name, "' in ", path,
                    " is an array: a flag takes one value (e.g. ", name, " = ...)");
    DDP_USAGE_CHECK(name != "config", "config key 'config' in ", path,
                    ": a config file cannot name another one (it would be ignored); pass the file you ",
                    "want with --config, or copy its keys into this one");
    const Flag* f = find_flag(table, name);
    if (f == nullptr) unknown_flag(table, name, "config key '" + name + "' in " + path);
    std::string text;
    if (auto b = node.value_exact<bool>(); b && f->type == FlagType::kBool) {
      text = *b ? "true" : "false";
    } else if (auto i = node.value_exact<int64_t>();
               i && (f->type == FlagType::kInt || f->type == FlagType::kDouble ||
                     f->type == FlagType::kDoubleOrAuto)) {
      text = std::to_string(*i);
    } else if (auto d = node.value_exact<double>();
               d && (f->type == FlagType::kDouble || f->type == FlagType::kDoubleOrAuto)) {
      text = format_double(*d);
    } else if (auto s = node.value_exact<std::string>();
               s && (f->type == FlagType::kString || (f->type == FlagType::kDoubleOrAuto && *s == "auto"))) {
      text = *s;
    } else {
      static const char* kTypeNames[] = {"a boolean", "an integer", "a number", "a string",
                                         "a number or \"auto\""};
      throw UsageError(detail::concat("config key '", name, "' in ", path, " must be ",
                                      kTypeNames[static_cast<int>(f->type)], "; e.g. ", name, " = ",
                                      quoted(*f)));
    }
    f->set(text);
  }
}

std::string flags_help(const std::vector<Flag>& table, const std::string& usage) {
  std::ostringstream os;
  os << usage << "\n\noptions:\n";
  for (const auto& f : table) {
    std::string left = "  --" + f.name;
    if (f.type == FlagType::kBool) left += ", --no-" + f.name;
    os << std::left << std::setw(34) << left << " " << f.help
       << " (default: " << (f.get().empty() ? "\"\"" : f.get()) << ")\n";
  }
  os << "  --help, -h                         show this help\n";
  return os.str();
}

nlohmann::json flags_to_json(const std::vector<Flag>& table) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& f : table) {
    std::string v = f.get();
    switch (f.type) {
      case FlagType::kBool:
        j[f.name] = (v == "true");
        break;
      case FlagType::kInt:
        j[f.name] = std::stoll(v);
        break;
      case FlagType::kDouble:
        j[f.name] = std::stod(v);
        break;
      case FlagType::kString:
        j[f.name] = v;
        break;
      case FlagType::kDoubleOrAuto:
        if (v == "auto")
          j[f.name] = v;
        else
          j[f.name] = std::stod(v);
        break;
    }
  }
  return j;
}

}  // namespace ddptrain
