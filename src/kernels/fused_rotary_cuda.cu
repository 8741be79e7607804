// The CUDA kernel of Note [Rotary in one pass] (kernels/fused_rotary.h): a thread per pair
// (i, i + D/2) of a row of x (batch, head, position); the products and sums rounded one at a
// time (__fmul_rn, __fadd_rn: nvcc would otherwise contract them into fused multiply-adds,
// which round once), so the result is bitwise the ATen ops'.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

#include "kernels/fused_rotary.h"

namespace ddptrain {

bool fused_rotary_has_cuda() { return true; }

namespace fused_rotary_detail {

namespace {

struct Strides {
  int64_t b, h, t;  // x's, in elements (the last dimension's is 1)
};

// Forward: out1 = x1 c1 + (-x2) s1, out2 = x2 c2 + x1 s2 (x·cos + rotate_half(x)·sin).
// Transpose (backward, x = the output's gradient g): g1 c1 + g2 s2, g2 c2 + (-(g1 s1)) (the
// gradient of x·cos plus rotate_half's transpose applied to g·sin).
template <typename T>
__global__ void rotate_kernel(const T* __restrict__ x, Strides s, const float* __restrict__ cos,
                              const float* __restrict__ sin, int64_t H, int64_t Tn, int64_t D, int64_t pairs,
                              bool transpose, T* __restrict__ out) {
  const int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= pairs) return;
  const int64_t half = D / 2, i = p % half, row = p / half;  // row: (b, h, t) in order
  const int64_t t = row % Tn, h = (row / Tn) % H, b = row / (Tn * H);
  const T* xr = x + b * s.b + h * s.h + t * s.t;
  const float x1 = static_cast<float>(xr[i]), x2 = static_cast<float>(xr[i + half]);
  const float c1 = cos[t * D + i], c2 = cos[t * D + i + half], s1 = sin[t * D + i],
              s2 = sin[t * D + i + half];
  float o1, o2;
  if (!transpose) {
    o1 = __fadd_rn(__fmul_rn(x1, c1), __fmul_rn(-x2, s1));
    o2 = __fadd_rn(__fmul_rn(x2, c2), __fmul_rn(x1, s2));
  } else {
    o1 = __fadd_rn(__fmul_rn(x1, c1), __fmul_rn(x2, s2));
    o2 = __fadd_rn(__fmul_rn(x2, c2), -__fmul_rn(x1, s1));
  }
  T* orow = out + row * D;
  orow[i] = static_cast<T>(o1);
  orow[i + half] = static_cast<T>(o2);
}

}  // namespace

void rotate_cuda(const at::Tensor& x_in, const at::Tensor& cos, const at::Tensor& sin, bool transpose,
                 at::Tensor& out) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.stride(3) == 1 ? x_in : x_in.contiguous();
  const int64_t B = x.size(0), H = x.size(1), Tn = x.size(2), D = x.size(3);
  const int64_t pairs = B * H * Tn * (D / 2);
  if (pairs == 0) return;
  const Strides s{x.stride(0), x.stride(1), x.stride(2)};
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>((pairs + kThreads - 1) / kThreads);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, x.scalar_type(), "rotary", [&] {
    rotate_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(x.data_ptr<scalar_t>(), s, cos.data_ptr<float>(),
                                                             sin.data_ptr<float>(), H, Tn, D, pairs,
                                                             transpose, out.data_ptr<scalar_t>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fused_rotary_detail

}  // namespace ddptrain
