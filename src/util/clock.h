// The one clock of step and evaluation timing (monotonic), and seconds since a point of it;
// wall-clock time for records read across processes.
#pragma once

#include <chrono>

namespace ddptrain {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Wall-clock seconds since the Unix epoch: for records other processes compare (metrics,
/// flight records, a launcher reading a rank's progress), not for durations.
inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace ddptrain
