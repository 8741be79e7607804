// Progress bar (rank 0, only when stdout is a terminal): one line per epoch redrawn in place
// with the step, a bar, ETA, samples/s and the loss (rank 0's mean over the micro-batches since
// the last step line would have been printed). When stdout is not a terminal (logs,
// CI) the trainer prints its plain step lines instead.
#pragma once

#include <chrono>
#include <cstdint>

namespace ddptrain {

class ProgressBar {
 public:
  explicit ProgressBar(bool is_main);
  bool active() const { return active_; }
  /// Whether update() would redraw now: the caller reads what the bar shows (the loss: a host
  /// sync on a GPU) only then.
  bool due(int64_t step, int64_t total) const;
  /// Redraws the bar (at most 10 times a second, and always at the last step).
  void update(int epoch, int64_t step, int64_t total, double loss, double samples_per_s, double eta_s);
  /// Ends the epoch's line.
  void finish();

 private:
  bool active_ = false;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace ddptrain
