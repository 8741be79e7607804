#include "util/env.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "util/error.h"

namespace ddptrain::env {

std::optional<std::string> get(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

bool parse_int(const std::string& s, long long* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

std::optional<long long> get_int(const std::string& name, long long min, long long max) {
  auto s = get(name);
  if (!s) return std::nullopt;
  long long v = 0;
  DDP_USAGE_CHECK(parse_int(*s, &v), "environment variable ", name, "='", *s,
                  "' is not an integer; set it to a whole number in [", min, ", ", max, "] or unset it");
  DDP_USAGE_CHECK(v >= min && v <= max, "environment variable ", name, "=", v,
                  " is out of range; it must be in [", min, ", ", max, "]");
  return v;
}

}  // namespace ddptrain::env
