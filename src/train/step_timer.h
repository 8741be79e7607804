// StepTimer: where a training step's wall time goes (always on: a clock read per phase). The trainer opens
// each phase and closes it; the time since the previous close is charged to the phase closed.
// Phases: data (waiting for the loader and the batch's copy to the device), fwd (forward +
// loss), bwd (backward, including the overlapped all-reduce and the wait for it at its end;
// the step line shows that wait separately), opt (optimizer step + zero_grad), end (the step's
// end: the stop vote, step lines, step checkpoints, callbacks).
// On CPU every op is synchronous, so the split is exact; on CUDA, kernels are asynchronous
// and time shows up where the host next waits: at world > 1 the stop vote waits for the
// step's queue to drain, so a GPU-bound step's GPU time is mostly "end" (not "data": it was,
// before end was split from the next step's data wait); at world 1 there is no vote, and it
// shows wherever the full launch queue blocks the host (fwd, bwd or opt; end at step lines).
#pragma once

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>

namespace ddptrain {

class StepTimer {
 public:
  enum Phase { kData, kForward, kBackward, kOptimizer, kStepEnd, kNumPhases };

  using Clock = std::chrono::steady_clock;
  StepTimer() = default;
  /// Starts timing from now (at the top of an epoch): nothing before it counts, no phase open.
  void restart() {
    last_ = Clock::now();
    totals_.fill(0.0);
    open_ = kNumPhases;
  }
  struct Interval {
    Clock::time_point start, end;
  };
  /// Opens a phase (the loop's phase now, Note [Loop phases]): the time since the last close
  /// goes to it, and take() charges it so far (a step line taken inside a phase counts that
  /// phase up to the line).
  void open(Phase p) {
    open_ = p;
    open_start_ = last_;
  }
  bool is_open() const { return open_ != kNumPhases; }
  /// Closes the open phase: charges it the time since the last close or take; returns it and
  /// its whole span (from the close before it opened).
  std::pair<Phase, Interval> close() {
    const auto now = Clock::now();
    const Phase p = open_;
    totals_[p] += std::chrono::duration<double>(now - last_).count();
    last_ = now;
    open_ = kNumPhases;
    return {p, Interval{open_start_, now}};
  }
  /// Seconds per phase since the last take() (the open phase's up to now), then resets.
  std::array<double, kNumPhases> take() {
    if (open_ != kNumPhases) {
      const auto now = Clock::now();
      totals_[open_] += std::chrono::duration<double>(now - last_).count();
      last_ = now;
    }
    auto t = totals_;
    totals_.fill(0.0);
    return t;
  }
  /// " | data 1.2 fwd 30.0 bwd 50.1 opt 3.0 end 0.2 ms/step (data wait 1.2%)" for totals over `steps` steps.
  static std::string format(const std::array<double, kNumPhases>& t, double steps) {
    std::string out = " |";
    for (int p = 0; p < kNumPhases; ++p) {
      char buf[48];
      std::snprintf(buf, sizeof(buf), " %s %.1f", name(static_cast<Phase>(p)), 1000.0 * t[p] / steps);
      out += buf;
    }
    char share[48];
    std::snprintf(share, sizeof(share), " ms/step (data wait %.1f%%)", 100.0 * data_share(t));
    return out + share;
  }
  /// The share of the step time spent waiting for data (0 when nothing was timed).
  static double data_share(const std::array<double, kNumPhases>& t) {
    double sum = 0;
    for (double x : t) sum += x;
    return sum > 0 ? t[kData] / sum : 0.0;
  }
  static const char* name(Phase p) {
    static const char* kNames[kNumPhases] = {"data", "fwd", "bwd", "opt", "end"};
    return kNames[p];
  }

 private:
  Clock::time_point last_ = Clock::now();
  std::array<double, kNumPhases> totals_{};
  Phase open_ = kNumPhases;  // none
  Clock::time_point open_start_ = last_;
};

}  // namespace ddptrain
