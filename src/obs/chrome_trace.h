// --enable_profiling: a Chrome trace (the JSON "traceEvents" format that Perfetto and
// chrome://tracing open) of a few training steps after a warm-up, one file per rank
// (<checkpoint_dir>/trace_rank<r>.json). Schedule like torch.profiler.schedule(wait=1,
// warmup=1, active=3): the first step is skipped, the second runs untraced, the next three
// are recorded, then the file is written. Events are the step phases (data wait, forward,
// backward with its overlapped all-reduce, optimizer) as complete ("X") events.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddptrain {

struct TraceSchedule {
  int wait = 1, warmup = 1, active = 3;
};

class ChromeTrace {
 public:
  using Clock = std::chrono::steady_clock;
  /// Inactive when path is empty.
  ChromeTrace(std::string path, int rank, TraceSchedule schedule = {});
  /// Whether the given optimizer step (counted from 0 in this run) is recorded.
  bool recording(int64_t run_step) const;
  void add(const char* name, Clock::time_point start, Clock::time_point end, int64_t run_step);
  /// Writes the file once the active steps are over (call after each step); true when written.
  bool maybe_write(int64_t run_step);
  const TraceSchedule& schedule() const { return schedule_; }
  /// Whether steps were recorded and the file is not written yet (the window is open).
  bool pending() const { return !written_ && !events_.empty(); }
  /// Writes what was recorded now (a window cut short); true when written.
  bool write();

 private:
  struct Event {
    const char* name;
    double ts_us, dur_us;
    int64_t step;
  };
  std::string path_;
  int rank_;
  TraceSchedule schedule_;
  Clock::time_point origin_ = Clock::now();
  // Microseconds since the Unix epoch at origin_: every rank's trace (and LibTorch's kernel
  // trace) on one time base, so ranks line up in Perfetto.
  double origin_unix_us_ =
      std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<Event> events_;
  bool written_ = false;
};

}  // namespace ddptrain
