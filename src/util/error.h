// Errors and checks, in two tiers (see ../shared/STYLE.md):
//  - UsageError: bad flag, config value or environment. The message names what, the value
//    and the fix; main() prints it and exits with code 2.
//  - Error: a runtime failure (I/O, collective, data). main() exits with code 1.
//  - DDP_ASSERT: an internal invariant; a failure is a bug in ddptrain, not user input.
// Library code never exits; it throws, and main() decides the exit code.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace ddptrain {

/// A user, configuration or environment error: exit code 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& msg) : std::runtime_error(msg) {}
};

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
  std::ostringstream os;
  (os << ... << args);
  return os.str();
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
