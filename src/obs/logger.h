// Rank-aware, levelled logging. Rank 0 prints INFO and above; other ranks print WARN and
// above, so a world of N ranks does not print every line N times. Each line carries the
// level and `[rank r/W]`. A Logger is a plain value (no global state): copy it where needed.
#pragma once

#include <string>

#include "util/strings.h"

namespace ddptrain {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

class Logger {
 public:
  Logger() = default;
  Logger(int rank, int world_size) : rank_(rank), world_size_(world_size) {}

  void info(const std::string& msg) const { write(LogLevel::kInfo, msg); }
  void warn(const std::string& msg) const { write(LogLevel::kWarn, msg); }
  void error(const std::string& msg) const { write(LogLevel::kError, msg); }
  /// Logs on every rank regardless of the rank's threshold (for per-rank facts).
  void info_all_ranks(const std::string& msg) const;

  bool enabled(LogLevel level) const;
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  void write(LogLevel level, const std::string& msg) const;
  void emit(LogLevel level, const std::string& msg) const;
  int rank_ = 0;
  int world_size_ = 1;
};

}  // namespace ddptrain
