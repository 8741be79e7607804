// The CUDA passes of Note [Fused cross-entropy] (kernels/fused_cross_entropy.h): one block per
// row. Forward reads the row once (each thread keeps an online max and sum of exponentials,
// one exponential per element; the pairs are combined across the block) and writes the row's
// log-sum-exp and loss; backward reads the row once and writes its gradient over it, in the
// logits' dtype. Accumulation in fp32 throughout. Rows whose start is 16-byte aligned (a
// padded vocabulary's view of 50304-wide rows is) are read and written 16 bytes at a time,
// 8 bf16 values per load, the rest element by element: the passes are bound by memory
// bandwidth (the 6.6 GB of GPT-2's bf16 logits at batch 64 x 1024), and 2-byte loads left
// them at a third of it (GPU check 2026-12-04: 6.4 and 8.7 ms per step for 1.7 and 3.1 ms
// of bytes).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cfloat>
#include <climits>
#include <cstdint>

#include "kernels/fused_cross_entropy.h"

namespace ddptrain {

bool fused_cross_entropy_has_cuda() { return true; }

namespace fused_ce_detail {

namespace {

constexpr int kThreads = 512;
constexpr int kVecBytes = 16;

// (max, sum of exp(x - max), the first index of the max) combined; i = INT_MAX: no element.
struct MaxSum {
  float m, s;
  int i;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  // Both saw only -inf (or nothing): their sums, 0 unless a NaN came in, which must stay (as
  // logsumexp's NaN) rather than vanish into a finite loss.
  if (a.m == -INFINITY && b.m == -INFINITY) return {a.m, a.s + b.s, min(a.i, b.i)};
  if (a.m > b.m) return {a.m, a.s + b.s * __expf(b.m - a.m), a.i};
  if (b.m > a.m) return {b.m, b.s + a.s * __expf(a.m - b.m), b.i};
  return {a.m, a.s + b.s, min(a.i, b.i)};  // equal maxima: the first index, as argmax
}

// Element j into a thread's running triple, in increasing j: one exponential (a new maximum
// rescales the sum); an equal value keeps the earlier index.
__device__ __forceinline__ void accumulate(MaxSum& v, float x, int j) {
  if (x > v.m) {
    v.s = v.s * __expf(v.m - x) + 1.f;
    v.m = x;
    v.i = j;
  } else if (x != -INFINITY) {
    v.s += __expf(x - v.m);
  }
}

__device__ __forceinline__ MaxSum shuffle_combine(MaxSum v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = combine(v, {__shfl_xor_sync(0xffffffff, v.m, offset), __shfl_xor_sync(0xffffffff, v.s, offset),
                    __shfl_xor_sync(0xffffffff, v.i, offset)});
  return v;
}

__device__ MaxSum block_combine(MaxSum v) {
  __shared__ float ms[32], ss[32];
  __shared__ int is[32];
  v = shuffle_combine(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) ms[warp] = v.m, ss[warp] = v.s, is[warp] = v.i;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? MaxSum{ms[lane], ss[lane], is[lane]} : MaxSum{-INFINITY, 0.f, INT_MAX};
  return shuffle_combine(v);  // every thread of warp 0 holds the block's triple
}

// K values of T in one 16-byte load or store.
template <typename T>
struct alignas(kVecBytes) Vec {
  static constexpr int K = kVecBytes / sizeof(T);
  T v[K];
};

// How many 16-byte vectors of a row's V elements the passes move as vectors: all whole ones
// when the row starts 16-byte aligned, none otherwise; the elements after them go one by one.
template <typename T>
__device__ __forceinline__ int64_t vector_part(const T* x, int64_t V) {
  return reinterpret_cast<uintptr_t>(x) % kVecBytes == 0 ? V / Vec<T>::K : 0;
}

template <typename T>
__global__ void forward_kernel(const T* __restrict__ logits, int64_t row_stride, int64_t V,
                               const int64_t* __restrict__ targets, float* __restrict__ lse,
                               float* __restrict__ losses, int64_t* __restrict__ hits) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * row_stride;
  constexpr int K = Vec<T>::K;
  const int64_t vectors = vector_part(x, V);
  MaxSum v{-INFINITY, 0.f, INT_MAX};
  const Vec<T>* xv = reinterpret_cast<const Vec<T>*>(x);
  for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
    const Vec<T> in = xv[i];
#pragma unroll
    for (int k = 0; k < K; ++k) accumulate(v, static_cast<float>(in.v[k]), static_cast<int>(i * K + k));
  }
  for (int64_t j = vectors * K + threadIdx.x; j < V; j += blockDim.x)
    accumulate(v, static_cast<float>(x[j]), static_cast<int>(j));
  v = block_combine(v);
  if (threadIdx.x == 0) {
    const int64_t t = targets[row];
    CUDA_KERNEL_ASSERT(t >= 0 && t < V);
    const float l = v.m + logf(v.s);
    lse[row] = l;
    losses[row] = l - static_cast<float>(x[t]);
    hits[row] = v.i == t && !isnan(l) && l != -INFINITY;  // as the CPU pass: no hit in such a row
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
  constexpr int K = Vec<T>::K;
  const int64_t vectors = vector_part(x, V);
  Vec<T>* xv = reinterpret_cast<Vec<T>*>(x);
  for (int64_t i = threadIdx.x; i < vectors; i += blockDim.x) {
    Vec<T> io = xv[i];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float p = __expf(static_cast<float>(io.v[k]) - l);
      if (i * K + k == t) p -= 1.f;
      io.v[k] = static_cast<T>(p * g);
    }
    xv[i] = io;
  }
  for (int64_t j = vectors * K + threadIdx.x; j < V; j += blockDim.x) {
    float p = __expf(static_cast<float>(x[j]) - l);
    if (j == t) p -= 1.f;
    x[j] = static_cast<T>(p * g);
  }
}

}  // namespace

void forward_cuda(const at::Tensor& logits, const at::Tensor& targets, at::Tensor& lse, at::Tensor& losses,
                  at::Tensor& hits) {
  const c10::cuda::CUDAGuard guard(logits.device());
  const at::Tensor t = targets.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kBFloat16, at::kHalf, logits.scalar_type(), "fused_cross_entropy_forward", [&] {
        forward_kernel<scalar_t><<<static_cast<unsigned>(N), kThreads, 0, stream>>>(
            logits.data_ptr<scalar_t>(), logits.stride(0), V, t.data_ptr<int64_t>(), lse.data_ptr<float>(),
            losses.data_ptr<float>(), hits.data_ptr<int64_t>());
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
