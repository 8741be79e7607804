// The one clock of step and evaluation timing (monotonic), and seconds since a point of it.
#pragma once

#include <chrono>

namespace ddptrain {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace ddptrain
