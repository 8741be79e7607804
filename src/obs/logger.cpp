#include "obs/logger.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace ddptrain {

bool Logger::enabled(LogLevel level) const {
  return rank_ == 0 ? level >= LogLevel::kInfo : level >= LogLevel::kWarn;
}

void Logger::write(LogLevel level, const std::string& msg) const {
  if (enabled(level)) emit(level, msg);
}

void Logger::info_all_ranks(const std::string& msg) const { emit(LogLevel::kInfo, msg); }

void Logger::emit(LogLevel level, const std::string& msg) const {
  static const char kLetters[] = {'D', 'I', 'W', 'E'};
  std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[16];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  // One fprintf per line keeps lines whole when loader threads or other ranks also write.
  FILE* out = level >= LogLevel::kWarn ? stderr : stdout;
  std::fprintf(out, "%s %c [rank %d/%d] %s\n", stamp, kLetters[static_cast<int>(level)], rank_, world_size_,
               msg.c_str());
  std::fflush(out);
}

}  // namespace ddptrain
