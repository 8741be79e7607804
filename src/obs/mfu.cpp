#include "obs/mfu.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "obs/logger.h"

#ifdef USE_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ddptrain {

double known_gpu_peak_tflops(const std::string& name, bool half) {
  // Dense tensor-core peaks (bf16/fp16; fp32 runs as tf32 where the GPU has it).
  struct Row {
    const char* key;
    double half_tflops, fp32_tflops;
  };
  // The first row whose key the device's name contains: the PCIe and NVL parts before the SXM
  // ones, whose names carry no form factor ("NVIDIA H100 80GB HBM3", "NVIDIA H200").
  static const Row rows[] = {
      {"H100 PCIe", 756.0, 378.0}, {"H100 NVL", 835.5, 417.5}, {"H200 NVL", 835.5, 417.5},
      {"H200", 989.0, 494.5},      {"H100", 989.0, 494.5},  // SXM; tf32 for fp32
      {"A100", 312.0, 156.0},      {"L40S", 362.0, 183.0},     {"A10", 125.0, 62.5},
      {"V100", 125.0, 15.7},
  };
  for (const auto& r : rows)
    if (name.find(r.key) != std::string::npos) return half ? r.half_tflops : r.fp32_tflops;
  return 0.0;
}

PeakFlops peak_flops(c10::Device device, bool half, double override_tflops, const CpuKernelRates& cpu) {
  if (override_tflops > 0) return {override_tflops * 1e12, str(override_tflops, " TFLOP/s from peak_tflops")};
#ifdef USE_CUDA
  if (device.is_cuda()) {
    const std::string name = at::cuda::getDeviceProperties(device.index())->name;
    const double t = known_gpu_peak_tflops(name, half);
    if (t > 0)
      return {t * 1e12, str(name, ": ", t, " TFLOP/s dense ", half ? "16-bit" : "fp32/tf32", " (table)")};
    return {0.0, str(name,
                     " is not in the peak table; set peak_tflops (TrainerOptions::report.peak_tflops; "
                     "ddptrain train --peak_tflops) for MFU")};
  }
#endif
  // CPU: the best dense kernel in the precision in use, as the probe measured it.
  const bool bf16 = half && cpu.conv_bf16 > 0;
  const double conv = bf16 ? cpu.conv_bf16 : cpu.conv_fp32, mm = bf16 ? cpu.matmul_bf16 : cpu.matmul_fp32;
  const double flops = std::max(conv, mm);
  return {flops, str("CPU peak measured at start-up on ", at::get_num_threads(),
                     " threads: ", static_cast<int64_t>(flops / 1e9), " GFLOP/s ", bf16 ? "bf16" : "fp32",
                     " (best of a 3x3 conv probe, ", static_cast<int64_t>(conv / 1e9),
                     ", and a matmul probe, ", static_cast<int64_t>(mm / 1e9), ")")};
}

}  // namespace ddptrain
