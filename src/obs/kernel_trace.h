// --enable_profiling's second file: LibTorch's own profiler (Kineto) over the same active steps
// as the phase trace (obs/chrome_trace.h): every ATen op on the CPU and, on CUDA, every kernel,
// memory copy and set on the GPU, as the Chrome trace torch.profiler writes
// (<checkpoint_dir>/kernels_rank<r>.json). scripts/profile_table.py turns it into the table of
// GPU (or CPU) time by kind of work that #27's levers are measured against (the GPU check puts it
// in gpu_report.json). Where LibTorch was built without Kineto, start() says so and does nothing.
#pragma once

#include <string>

namespace ddptrain {

class KernelTrace {
 public:
  KernelTrace() = default;
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;
  /// A trace still recording (a run shorter than the recorded steps) is dropped.
  ~KernelTrace();
  /// Starts recording CPU ops, and the GPU's kernels when `cuda`; false (with `why`) where the
  /// profiler refuses to start (a LibTorch without Kineto).
  bool start(bool cuda, std::string* why);
  /// Stops and writes the trace to `path` (when started); false otherwise, with `why` when the
  /// profiler cannot write one (Debian's LibTorch 1.13 records but has no Kineto to save with).
  bool stop_and_save(const std::string& path, std::string* why);
  bool active() const { return active_; }

 private:
  bool active_ = false;
  bool cuda_ = false;
};

}  // namespace ddptrain
