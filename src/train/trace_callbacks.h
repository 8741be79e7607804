// Two traces of a run, as callbacks: the data order (trace_samples_dir: "epoch E micro M: i i
// ..." per micro-batch, one file per rank, for debugging and the exact-resume tests) and the
// profiler (enable_profiling: a Chrome trace of the step phases of some steps, in
// checkpoint_dir; obs/chrome_trace.h, and LibTorch's trace of the ops and GPU kernels of the
// same steps; obs/kernel_trace.h).
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include "dist/dist_context.h"
#include "obs/chrome_trace.h"
#include "obs/kernel_trace.h"
#include "train/callbacks.h"

namespace ddptrain {

class SampleTrace : public Callback {
 public:
  /// Appends to DIR/rank<r>.txt: a line "# run world W" per run, then one line per
  /// micro-batch, "epoch E micro M: i1 i2 ...".
  SampleTrace(const std::string& dir, int rank, int world);
  void on_micro_batch(const TrainState& s, const MicroBatchEvent& e) override;

 private:
  std::ofstream out_;
};

class Profiler : public Callback {
 public:
  /// The steps of `schedule` (counted from 0 in this run): the step lines' phases, and LibTorch's
  /// profiler from the end of the step before the first.
  Profiler(const std::string& checkpoint_dir, const DistContext& ctx, TraceSchedule schedule = {});
  void on_phase(const TrainState& s, const PhaseEvent& e) override;
  void on_step_end(const TrainState& s, const StepEvent& e) override;
  void on_epoch_begin(const TrainState& s, const EpochPosition& p) override;
  void on_epoch_trained(const TrainState& s) override;

 private:
  void start_kernels();
  void write_trace();
  void write_kernels();
  /// A window the run's or the epoch's end cuts short: what was recorded is written, and said.
  void cut_short(const TrainState& s, const char* where);
  const DistContext& ctx_;
  std::string path_, kernels_path_;
  ChromeTrace trace_;
  KernelTrace kernels_;
};

}  // namespace ddptrain
