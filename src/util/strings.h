// Building strings for messages: str() of streamable parts, fmt() of one number.
#pragma once

#include <csignal>
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
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGTERM:
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
