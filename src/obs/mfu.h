// Model FLOPs utilisation: achieved model FLOP/s / the hardware's peak FLOP/s.
// Peak: --peak_tflops when given; on CUDA a table of known GPUs (dense, per GPU) for the
// precision in use (fp32: TF32's where TF32 matmuls are allowed, --tf32, else IEEE fp32's); on CPU a measured
// peak: the faster of a 3x3 convolution and a matrix multiply in the precision in use, on the rank's intra-op
// threads, taken once at start-up by the kernel probe (obs/kernel_probe.h; the log says so and gives both).
#pragma once

#include <string>

#include <c10/core/Device.h>

#include "obs/kernel_probe.h"

namespace ddptrain {

struct PeakFlops {
  double flops_per_s = 0;  // per rank (one GPU, or one rank's CPU threads)
  std::string source;      // how it was obtained, for the log
};

/// The peak for this rank's device. half_precision: whether training runs 16-bit autocast;
/// cpu: the start-up probe's rates (CPU only); convolutional: the model's work is mostly
/// convolutions (4-D weights), which cuDNN runs in TF32 by default where matmuls are IEEE fp32.
PeakFlops peak_flops(c10::Device device, bool half_precision, double override_tflops,
                     const CpuKernelRates& cpu, bool convolutional = false);

/// Which of a GPU's peaks: 16-bit tensor cores, TF32 tensor cores (fp32 matmuls with TF32
/// allowed), or IEEE fp32.
enum class GpuPeakKind { kHalf, kTf32, kFp32 };

/// The peak that bounds a GPU's training step: 16-bit under autocast; in fp32, TF32 where the
/// model's main kernels take it (cuBLAS's matmuls with --tf32; cuDNN's convolutions, TF32 by
/// default, for a convolutional model), else IEEE fp32 (measured against that, a convolutional
/// fp32 model read above 100%).
GpuPeakKind gpu_peak_kind(bool half_precision, bool tf32_matmuls, bool tf32_convolutions, bool convolutional);

/// Peak TFLOP/s (dense) of a known GPU by its name, 0 when unknown. A MIG instance ("... MIG
/// 1g.10gb") has its share of the part's: `multiprocessors` (its SM count) over the part's; 0
/// where either count is unknown.
double known_gpu_peak_tflops(const std::string& name, GpuPeakKind kind, int multiprocessors = 0);

/// MFU = achieved FLOP/s over all ranks / (peak per rank x ranks).
inline double mfu(double flops_per_sample, double samples_per_s, double peak_per_rank, int world) {
  return peak_per_rank > 0 ? flops_per_sample * samples_per_s / (peak_per_rank * world) : 0.0;
}

}  // namespace ddptrain
