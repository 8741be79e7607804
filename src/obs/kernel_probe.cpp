#include "obs/kernel_probe.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#ifdef USE_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ddptrain {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A kernel to time, with the FLOPs of one call.
struct Kernel {
  std::function<void()> fn;
  double flops = 0;
  double best_s = 1e30;
};

// Warm-up calls pay the one-time costs (oneDNN primitive creation, page faults); then rounds
// that time every kernel once each, interleaved, so a neighbour's burst of load slows the
// fp32 and bf16 variants alike instead of only one of them; the best call of each counts.
// At least one round, then more while the budget lasts (a slow emulated bf16 ends it early).
void time_interleaved(std::vector<Kernel>& kernels, double budget_s) {
  constexpr int kMaxRounds = 5;
  const auto start = Clock::now();
  for (auto& k : kernels) k.fn();
  for (int round = 0; round < kMaxRounds && (round == 0 || seconds(start) < budget_s); ++round)
    for (auto& k : kernels) {
      const auto t0 = Clock::now();
      k.fn();
      k.best_s = std::min(k.best_s, seconds(t0));
    }
}

// The probe's numbers come from a generator of its own: the global one (dropout, data) is
// left as the seed set it.
at::Tensor probe_randn(at::IntArrayRef size, at::ScalarType dtype) {
  static constexpr uint64_t kProbeSeed = 1234;
  return at::randn(size, at::detail::createCPUGenerator(kProbeSeed)).to(dtype);
}

// 256 channels at 8x8 in channels-last (MiniResNet's layout): the fastest of the shapes
// tried on this machine (up to 2x the rate of 64 channels at 32x32), so the peak is not
// underestimated; 16 images keep an emulated bf16 call short.
Kernel conv(at::ScalarType dtype) {
  const int64_t n = 16, c = 256, hw = 8;
  const at::Tensor x = probe_randn({n, c, hw, hw}, dtype).contiguous(at::MemoryFormat::ChannelsLast);
  const at::Tensor w = probe_randn({c, c, 3, 3}, dtype).contiguous(at::MemoryFormat::ChannelsLast);
  return {[x, w] { at::conv2d(x, w, {}, 1, 1); }, 2.0 * n * c * c * 9 * hw * hw};
}

Kernel matmul(at::ScalarType dtype) {
  const int64_t n = 512;
  const at::Tensor a = probe_randn({n, n}, dtype), b = probe_randn({n, n}, dtype);
  return {[a, b] { at::mm(a, b); }, 2.0 * n * n * n};
}

}  // namespace

bool cuda_has_bf16(c10::Device device) {
#ifdef USE_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->major >= 8;
#endif
  return false;
}

CpuKernelRates probe_cpu_kernels(bool with_bf16) {
  at::NoGradGuard no_grad;
  std::vector<Kernel> k = {conv(at::kFloat), matmul(at::kFloat)};
  if (with_bf16) {
    k.push_back(conv(at::kBFloat16));
    k.push_back(matmul(at::kBFloat16));
  }
  time_interleaved(k, 0.4);
  auto rate = [&](size_t i) { return i < k.size() ? k[i].flops / k[i].best_s : 0.0; };
  return {rate(0), rate(1), rate(2), rate(3)};
}

}  // namespace ddptrain
