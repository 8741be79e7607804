// Errors and checks, in two tiers (see ../shared/STYLE.md):
//  - UsageError: bad flag, config value or environment. The message names what, the value
//    and the fix; main() prints it and exits with code 2.
//  - Error: a runtime failure (I/O, collective, data). main() exits with code 1.
//  - DDP_ASSERT: an internal invariant; a failure is a bug in ddptrain, not user input.
// Library code never exits; it throws, and main() decides the exit code.
#pragma once

#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/strings.h"

namespace ddptrain {

/// A user, configuration or environment error: exit code 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& msg) : std::runtime_error(msg) {}
};

// Note [Options named by their field]
// An options struct of the library (TrainerOptions and its parts) validates itself and names
// a bad field the way the library's user sets it ("TrainerOptions::loop.epochs=0 must be
// >= 1"); a program whose users set the same fields another way (`ddptrain train`: flags
// bound to those fields) spells the error in its own words without a second copy of the
// rule: the error carries each field's address, and the program maps the address to its
// name (config/flag_table.h: "--epochs=0 must be >= 1").
struct OptionField {
  const void* address;
  std::string name;  // as the library spells it, under its struct: "loop.epochs"; a field of
                     // another struct, already qualified: "DataOptions::dataset"
};

/// A bad option value (Note [Options named by their field]). In `text`, {i} stands for
/// fields[i] and {i:V} for "fields[i] set to V" (the fix); what() spells them
/// "TrainerOptions::loop.epochs" and "TrainerOptions::loop.epochs = 10". Text from elsewhere
/// (a path, another error's message) goes in through literal(), so that its braces stay braces.
class OptionError : public UsageError {
 public:
  /// A field's name, and the value it is set to when `value` is not null.
  using Speller = std::function<std::string(const OptionField& field, const std::string* value)>;
  OptionError(std::vector<OptionField> fields, std::string text, std::string owner = "TrainerOptions");
  const std::vector<OptionField>& fields() const { return fields_; }
  /// The struct the fields belong to, as the library names it: "TrainerOptions".
  const std::string& owner() const { return owner_; }
  /// The field's full name: "TrainerOptions::loop.epochs" (a name holding "::" is already whole).
  std::string qualified(const OptionField& f) const { return qualified(owner_, f); }
  static std::string qualified(const std::string& owner, const OptionField& f) {
    return f.name.find("::") != std::string::npos ? f.name : owner + "::" + f.name;
  }
  /// `text` as it is to read in the message: each "{" doubled ("{{" stands for "{").
  static std::string literal(const std::string& text);
  /// The same error, its fields declared members of the struct at `base` (the TrainerOptions
  /// they belong to): a program can then name the fields of a copy of its own options.
  OptionError within(const void* base) const {
    OptionError e = *this;
    e.base_ = base;
    return e;
  }
  const void* base() const { return base_; }
  /// The message with every field named by `name`.
  std::string spelled(const Speller& name) const;

 private:
  std::vector<OptionField> fields_;
  std::string text_;
  std::string owner_;
  const void* base_ = nullptr;
};

namespace detail {
template <typename T>
void check_option_bound(bool ok, const T& field, const char* name, const char* rule, const std::string& fix,
                        const char* owner) {
  if (ok) return;
  std::ostringstream os;
  os << "{0}=" << field << " must be " << rule << "; " << fix;
  throw OptionError({{&field, name}}, os.str(), owner);
}
}  // namespace detail

/// Throw OptionError "{0}=<value> must be > 0; <fix>" (or ">= 0") for `field`, named `name`
/// in its struct, unless it holds; the fix may name the field ("pass {0:1} for none").
template <typename T>
void check_option_positive(const T& field, const char* name, const std::string& fix,
                           const char* owner = "TrainerOptions") {
  detail::check_option_bound(field > 0, field, name, "> 0", fix, owner);
}
template <typename T>
void check_option_non_negative(const T& field, const char* name, const std::string& fix,
                               const char* owner = "TrainerOptions") {
  detail::check_option_bound(field >= 0, field, name, ">= 0", fix, owner);
}

/// A runtime failure that is not the user's input: exit code 1.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

/// A collective failed, usually because another rank died: a consequence, not a root cause.
class CollectiveError : public Error {
 public:
  explicit CollectiveError(const std::string& msg) : Error(msg) {}
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  return ::ddptrain::str(args...);
}
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const std::string& msg);
}  // namespace detail

}  // namespace ddptrain

/// Throws UsageError with the concatenated message when cond is false.
#define DDP_USAGE_CHECK(cond, ...)                                                      \
  do {                                                                                  \
    if (!(cond)) throw ::ddptrain::UsageError(::ddptrain::detail::concat(__VA_ARGS__)); \
  } while (0)

/// Throws Error with the concatenated message when cond is false.
#define DDP_CHECK(cond, ...)                                                       \
  do {                                                                             \
    if (!(cond)) throw ::ddptrain::Error(::ddptrain::detail::concat(__VA_ARGS__)); \
  } while (0)

/// Internal invariant: a failure is a ddptrain bug.
#define DDP_ASSERT(cond, ...)                                                                     \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::ddptrain::detail::assert_fail(#cond, __FILE__, __LINE__,                                  \
                                      ::ddptrain::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
