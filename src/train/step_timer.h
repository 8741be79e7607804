// StepTimer: where a training step's wall time goes (--enable_profiling). The trainer marks
// the end of each phase; the time since the previous mark is charged to that phase.
// Phases: data (waiting for the loader), fwd (forward + loss), bwd (backward, including the
// overlapped all-reduce and the wait for it at its end; the step line shows that wait
// separately), opt (optimizer step + zero_grad).
// On CPU every op is synchronous, so the split is exact; on CUDA, kernels are asynchronous
// and time shows up where the host next waits.
#pragma once

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

namespace ddptrain {

class StepTimer {
 public:
  enum Phase { kData, kForward, kBackward, kOptimizer, kNumPhases };

  explicit StepTimer(bool enabled) : enabled_(enabled) {}
  /// Starts timing from now (at the top of an interval).
  void restart() { last_ = Clock::now(); }
  /// Charges the time since the previous mark to `phase`.
  void mark(Phase phase) {
    if (!enabled_) return;
    auto now = Clock::now();
    totals_[phase] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  /// " | data 1% fwd 30% ..." for the interval so far, then resets; "" when disabled.
  std::string take_summary() {
    if (!enabled_) return "";
    static const char* kNames[kNumPhases] = {"data", "fwd", "bwd", "opt"};
    double sum = 0;
    for (double t : totals_) sum += t;
    std::string out = " |";
    for (int p = 0; p < kNumPhases; ++p) {
      char buf[48];
      std::snprintf(buf, sizeof(buf), " %s %.0f%%", kNames[p], sum > 0 ? 100.0 * totals_[p] / sum : 0.0);
      out += buf;
    }
    totals_.fill(0.0);
    return out;
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool enabled_;
  Clock::time_point last_ = Clock::now();
  std::array<double, kNumPhases> totals_{};
};

}  // namespace ddptrain
