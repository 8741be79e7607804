#include "obs/mfu.h"

#include <algorithm>
#include <chrono>
#include <functional>

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
  static const Row rows[] = {
      {"H200", 989.0, 494.5}, {"H100", 989.0, 494.5},  // SXM; tf32 for fp32
      {"A100", 312.0, 156.0}, {"L40S", 362.0, 183.0}, {"A10", 125.0, 62.5}, {"V100", 125.0, 15.7},
  };
  for (const auto& r : rows)
    if (name.find(r.key) != std::string::npos) return half ? r.half_tflops : r.fp32_tflops;
  return 0.0;
}

PeakFlops peak_flops(c10::Device device, bool half, double override_tflops) {
  if (override_tflops > 0) return {override_tflops * 1e12, str(override_tflops, " TFLOP/s from --peak_tflops")};
#ifdef USE_CUDA
  if (device.is_cuda()) {
    const std::string name = at::cuda::getDeviceProperties(device.index())->name;
    const double t = known_gpu_peak_tflops(name, half);
    if (t > 0) return {t * 1e12, str(name, ": ", t, " TFLOP/s dense ", half ? "16-bit" : "fp32/tf32", " (table)")};
    return {0.0, str(name, " is not in the peak table; pass --peak_tflops for MFU")};
  }
#endif
  // CPU: measure the best dense kernel this LibTorch has. A 3x3 convolution (oneDNN) and a
  // matrix multiply (the BLAS LibTorch was built with: Debian's is the generic reference
  // BLAS, far below the CPU's peak); each warmed up once, then the best of 3 runs.
  auto best_rate = [](const std::function<void()>& fn, double flops) {
    fn();
    double best = 1e30;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return flops / best;
  };
  at::NoGradGuard no_grad;
  // 256 channels at 8x8: the fastest of the shapes tried on this machine (up to 2x the
  // rate of 64 channels at 32x32), so the peak is not underestimated.
  const at::Tensor x = at::randn({64, 256, 8, 8}), w = at::randn({256, 256, 3, 3});
  const double conv = best_rate([&] { at::conv2d(x, w, {}, 1, 1); }, 2.0 * 64 * 256 * 256 * 9 * 8 * 8);
  const int64_t n = 512;
  const at::Tensor a = at::randn({n, n}), b = at::randn({n, n});
  const double mm = best_rate([&] { at::mm(a, b); }, 2.0 * n * n * n);
  const double flops = std::max(conv, mm);
  return {flops, str("CPU peak measured at start-up on ", at::get_num_threads(), " threads: ",
                     static_cast<int64_t>(flops / 1e9), " GFLOP/s fp32 (best of a 3x3 conv probe, ",
                     static_cast<int64_t>(conv / 1e9), ", and a matmul probe, ", static_cast<int64_t>(mm / 1e9), ")")};
}

}  // namespace ddptrain
