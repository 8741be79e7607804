// Building strings for messages: str() of streamable parts, fmt() of one number.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>

namespace ddptrain {

/// Builds a string from streamable parts: log.info(str("loss ", loss)).
template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

/// Whether s ends with suffix.
inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), std::string::npos, suffix) == 0;
}

/// "SIGTERM" for the stop signals a run handles, else "signal N".
inline std::string signal_name(int sig) {
  switch (sig) {
    case 1:
      return "SIGHUP";
    case 2:
      return "SIGINT";
    case 3:
      return "SIGQUIT";
    case 15:
      return "SIGTERM";
    default:
      return "signal " + std::to_string(sig);
  }
}

/// One number through a printf format: fmt("%.4f", loss).
inline std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

}  // namespace ddptrain
