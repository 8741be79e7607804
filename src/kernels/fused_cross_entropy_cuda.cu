// The CUDA passes of Note [Fused cross-entropy] (kernels/fused_cross_entropy.h): one block per
// row. Forward reads the row once (an online max and sum of exponentials per thread, combined
// across the block) and writes the row's log-sum-exp and loss; backward reads the row once and
// writes its gradient over it, in the logits' dtype. Accumulation in fp32 throughout.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cfloat>

#include "kernels/fused_cross_entropy.h"

namespace ddptrain {

bool fused_cross_entropy_has_cuda() { return true; }

namespace fused_ce_detail {

namespace {

constexpr int kThreads = 512;

// (max, sum of exp(x - max)) pairs combined.
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ MaxSum block_combine(MaxSum v) {
  __shared__ float ms[32], ss[32];
  for (int offset = 16; offset > 0; offset /= 2)
    v = combine(v, {__shfl_xor_sync(0xffffffff, v.m, offset), __shfl_xor_sync(0xffffffff, v.s, offset)});
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) ms[warp] = v.m, ss[warp] = v.s;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? MaxSum{ms[lane], ss[lane]} : MaxSum{-INFINITY, 0.f};
  for (int offset = 16; offset > 0; offset /= 2)
    v = combine(v, {__shfl_xor_sync(0xffffffff, v.m, offset), __shfl_xor_sync(0xffffffff, v.s, offset)});
  return v;  // every thread of warp 0 holds the block's pair
}

template <typename T>
__global__ void forward_kernel(const T* __restrict__ logits, int64_t row_stride, int64_t V,
                               const int64_t* __restrict__ targets, float* __restrict__ lse,
                               float* __restrict__ losses) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  MaxSum v{-INFINITY, 0.f};
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) v = combine(v, {static_cast<float>(x[j]), 1.f});
  v = block_combine(v);
  if (threadIdx.x == 0) {
    const int64_t t = targets[row];
    CUDA_KERNEL_ASSERT(t >= 0 && t < V);
    const float l = v.m + logf(v.s);
    lse[row] = l;
    losses[row] = l - static_cast<float>(x[t]);
  }
}

template <typename T>
__global__ void backward_kernel(T* __restrict__ logits, int64_t row_stride, int64_t V,
                                const int64_t* __restrict__ targets, const float* __restrict__ lse,
                                const float* __restrict__ scale) {
  const int64_t row = blockIdx.x;
  T* x = logits + row * row_stride;
  const float l = lse[row], g = *scale;
  const int64_t t = targets[row];
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    float p = expf(static_cast<float>(x[j]) - l);
    if (j == t) p -= 1.f;
    x[j] = static_cast<T>(p * g);
  }
}

}  // namespace

void forward_cuda(const at::Tensor& logits, const at::Tensor& targets, at::Tensor& lse, at::Tensor& losses) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const at::Tensor t = targets.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, logits.scalar_type(), "fused_cross_entropy_forward", [&] {
        forward_kernel<scalar_t><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
            logits.data_ptr<scalar_t>(), logits.stride(0), V, t.data_ptr<int64_t>(), lse.data_ptr<float>(),
            losses.data_ptr<float>());
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void backward_cuda(at::Tensor& logits, const at::Tensor& targets, const at::Tensor& lse,
                   const at::Tensor& scale) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const at::Tensor t = targets.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, logits.scalar_type(), "fused_cross_entropy_backward", [&] {
        backward_kernel<scalar_t><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
            logits.data_ptr<scalar_t>(), logits.stride(0), V, t.data_ptr<int64_t>(), lse.data_ptr<float>(),
            scale.data_ptr<float>());
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fused_ce_detail

}  // namespace ddptrain
