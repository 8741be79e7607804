// The CLI as one table (see ../shared/STYLE.md, "The CLI is one table").
// Each flag is declared once: name, help, type and a binding to a field of an options struct.
// From that one table come: argv parsing, TOML parsing (same keys), --help, and the resolved
// config dump (JSON). Parsing is strict: unknown flags, malformed values and missing values
// are UsageErrors naming the flag, the value and the fix.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "util/choices.h"
#include "util/error.h"

namespace ddptrain {

enum class FlagType { kBool, kInt, kDouble, kString, kDoubleOrAuto };

struct Flag {
  std::string name;  // without the leading dashes
  FlagType type;
  std::string help;
  std::function<void(const std::string&)> set;  // parses and stores; UsageError when malformed
  std::function<std::string()> get;             // the current value, as text
  const void* field = nullptr;  // the field it is bound to (Note [Options named by their field])
};

namespace detail {
/// An integer flag whose values lie in [min, max].
Flag integer_flag(const std::string& name, const std::string& help, long long min, long long max,
                  std::function<void(long long)> set, std::function<long long()> get, const void* field);
}  // namespace detail

/// The flag of table named `name` (without dashes), or null.
const Flag* find_flag(const std::vector<Flag>& table, const std::string& name);

/// Binds a flag to a field; the field's current value is the default shown in --help.
Flag bind_flag(const std::string& name, bool* field, const std::string& help);
Flag bind_flag(const std::string& name, double* field, const std::string& help);
/// Any integer field: a value outside its type's range is a UsageError.
template <typename T, typename = std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>>
Flag bind_flag(const std::string& name, T* field, const std::string& help) {
  constexpr long long kMax = std::numeric_limits<T>::max() > std::numeric_limits<long long>::max()
                                 ? std::numeric_limits<long long>::max()
                                 : static_cast<long long>(std::numeric_limits<T>::max());
  return detail::integer_flag(
      name, help, static_cast<long long>(std::numeric_limits<T>::min()), kMax,
      [field](long long v) { *field = static_cast<T>(v); },
      [field] { return static_cast<long long>(*field); }, field);
}
Flag bind_flag(const std::string& name, std::string* field, const std::string& help);
/// A number or the word auto (stored as nullopt: the program chooses, and says how).
Flag bind_flag(const std::string& name, std::optional<double>* field, const std::string& help);

/// A flag that is one of the words of `choices` (Note [Choices are enums]): --help shows
/// "word | word: help", any other word is a UsageError naming the words.
template <typename E>
Flag bind_choice(const std::string& name, E* field, const Choices<E>& choices, const std::string& help) {
  return {name,
          FlagType::kString,
          choices.list() + ": " + help,
          [=, &choices](const std::string& v) {
            const std::optional<E> e = choices.parse(v);
            if (!e)
              throw UsageError(detail::concat("--", name, "='", v, "' is not one of ", choices.list(", ")));
            *field = *e;
          },
          [=, &choices] { return std::string(choices.word(*field)); },
          field};
}

/// Parses argv-style args against the table. Accepts `--name value`, `--name=value`, and for
/// booleans `--name` / `--no-name`. Returns the positional arguments (none are expected by
/// most commands; the caller decides).
std::vector<std::string> parse_flags(const std::vector<Flag>& table, const std::vector<std::string>& args);

/// Applies a TOML file whose keys are flag names (top level only). UsageError on unknown
/// keys, wrong types or a missing/unparsable file.
void apply_toml_file(const std::vector<Flag>& table, const std::string& path);

/// The --help text generated from the table.
std::string flags_help(const std::vector<Flag>& table, const std::string& usage);

/// The table's current values as a JSON object (typed).
nlohmann::json flags_to_json(const std::vector<Flag>& table);

/// The message of an OptionError of the options `table` is bound to, with each field named
/// by its flag ("--epochs", "--epochs 10"); a field no flag binds keeps the library's name.
/// `bound`: the struct the table's fields belong to, for an error raised on a copy of it
/// (OptionError::within: the Trainer's own TrainerOptions); null: the table's own fields.
std::string in_flag_words(const OptionError& e, const std::vector<Flag>& table, const void* bound = nullptr);

/// True when args contain --help or -h.
bool wants_help(const std::vector<std::string>& args);

}  // namespace ddptrain
