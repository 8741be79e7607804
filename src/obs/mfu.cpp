#include "obs/mfu.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "obs/logger.h"
#include "util/torch_compat.h"

#ifdef USE_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ddptrain {

double known_gpu_peak_tflops(const std::string& name, GpuPeakKind kind, int multiprocessors) {
  // Dense peaks: tensor cores in bf16/fp16 and in TF32, and IEEE fp32 (no tensor cores); the
  // whole part's SM count (for a MIG instance's share; 0: no MIG on it).
  struct Row {
    const char* key;
    double half_tflops, tf32_tflops, fp32_tflops;
    int sms;
  };
  // The first row whose key the device's name contains as whole words (before it a space or the
  // start, after it a space, '-' or the end: "RTX A1000" is no A100, "A10G" no A10): the PCIe and
  // NVL parts before the SXM ones, whose names carry no form factor ("NVIDIA H100 80GB HBM3").
  static const Row rows[] = {
      {"H100 PCIe", 756.0, 378.0, 51.2, 114}, {"H100 NVL", 835.5, 417.5, 60.0, 132},
      {"H200 NVL", 835.5, 417.5, 60.0, 132},  {"GH200", 989.0, 494.5, 67.0, 132},
      {"H200", 989.0, 494.5, 67.0, 132},      {"H100", 989.0, 494.5, 67.0, 132},  // SXM
      {"A100", 312.0, 156.0, 19.5, 108},      {"L40S", 362.0, 183.0, 91.6, 0},
      {"A10", 125.0, 62.5, 31.2, 0},          {"V100S", 130.0, 16.4, 16.4, 0},
      {"V100-PCIE", 112.0, 14.0, 14.0, 0},  // before V100 (the SXM2 part's); no TF32: fp32
      {"V100", 125.0, 15.7, 15.7, 0},
  };
  const auto names = [&](const std::string& key) {
    for (size_t at = name.find(key); at != std::string::npos; at = name.find(key, at + 1)) {
      const size_t end = at + key.size();
      if ((at == 0 || name[at - 1] == ' ') && (end == name.size() || name[end] == ' ' || name[end] == '-'))
        return true;
    }
    return false;
  };
  // A MIG instance's name carries the part's ("NVIDIA A100-SXM4-40GB MIG 1g.10gb"): a share.
  const bool mig = name.find(" MIG ") != std::string::npos;
  for (const auto& r : rows)
    if (names(r.key)) {
      const double whole = kind == GpuPeakKind::kHalf   ? r.half_tflops
                           : kind == GpuPeakKind::kTf32 ? r.tf32_tflops
                                                        : r.fp32_tflops;
      if (!mig) return whole;
      return r.sms > 0 && multiprocessors > 0 ? whole * std::min(multiprocessors, r.sms) / r.sms : 0.0;
    }
  return 0.0;
}

GpuPeakKind gpu_peak_kind(bool half, bool tf32_matmuls, bool tf32_convolutions, bool convolutional) {
  if (half) return GpuPeakKind::kHalf;
  return (convolutional ? tf32_convolutions : tf32_matmuls) ? GpuPeakKind::kTf32 : GpuPeakKind::kFp32;
}

PeakFlops peak_flops(c10::Device device, bool half, double override_tflops, const CpuKernelRates& cpu,
                     bool convolutional) {
  if (override_tflops > 0) return {override_tflops * 1e12, str(override_tflops, " TFLOP/s from peak_tflops")};
#ifdef USE_CUDA
  if (device.is_cuda()) {
    const std::string name = at::cuda::getDeviceProperties(device.index())->name;
    // fp32: the main kernels' precision decides (PyTorch's default is IEEE fp32 for matmuls,
    // TF32 for cuDNN's convolutions).
    const GpuPeakKind kind = gpu_peak_kind(half, at::globalContext().allowTF32CuBLAS(),
                                           compat::allow_tf32_cudnn_convolutions(), convolutional);
    const bool tf32 = kind == GpuPeakKind::kTf32;
    const double t =
        known_gpu_peak_tflops(name, kind, at::cuda::getDeviceProperties(device.index())->multiProcessorCount);
    if (t > 0)
      return {t * 1e12,
              str(name, ": ", t, " TFLOP/s dense ",
                  half   ? "16-bit"
                  : tf32 ? (convolutional ? "tf32 (fp32 convolutions in TF32: cuDNN's default)"
                                          : "tf32 (fp32 matmuls in TF32: the program's setting, --tf32)")
                         : "fp32 (IEEE fp32 matmuls; TF32 is the program's setting, --tf32)",
                  name.find(" MIG ") != std::string::npos ? " (table, this MIG instance's share of the SMs)"
                                                          : " (table)")};
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
