// The CUDA passes of Note [LayerNorm into the autocast dtype] (kernels/fused_layer_norm.h):
// rows of C = 128 K fp32 values, a warp per row, each lane holding K float4 of it. Forward
// computes the row's mean and variance in two passes over the registers and writes the
// normalised row in the output's dtype; backward writes dx in fp32 and adds dy * xhat and dy
// into per-warp weight and bias sums in registers, which each warp then stores as one row of
// a partial-sum table; a last kernel sums that table's rows in a fixed order. Rms: the same
// passes for RMSNorm (no mean subtracted, no bias: the mean is taken as 0 and the bias terms
// drop out), as rms_norm_to computes it. With a residual branch (add_layer_norm_to), forward
// first adds it to the row and writes that sum, and backward adds the sum's own gradient to dx
// and writes dx once more in the branch's dtype (its gradient).
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>

#include "kernels/fused_layer_norm.h"

namespace ddptrain {

bool fused_layer_norm_has_cuda() { return true; }

namespace fused_ln_detail {

namespace {

constexpr int kWarps = 8;  // rows per block in flight

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffff, v, offset);
  return v;
}

// Four values of T in one load or store.
template <typename T>
struct alignas(4 * sizeof(T)) Four {
  T v[4];
};

__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }

template <typename T>
__device__ __forceinline__ float4 load4(const T* p) {
  const Four<T> f = *reinterpret_cast<const Four<T>*>(p);
  return make_float4(static_cast<float>(f.v[0]), static_cast<float>(f.v[1]), static_cast<float>(f.v[2]),
                     static_cast<float>(f.v[3]));
}

template <typename T>
__device__ __forceinline__ void store4(T* p, float4 a) {
  Four<T> f;
  f.v[0] = static_cast<T>(a.x), f.v[1] = static_cast<T>(a.y), f.v[2] = static_cast<T>(a.z),
  f.v[3] = static_cast<T>(a.w);
  *reinterpret_cast<Four<T>*>(p) = f;
}

__device__ __forceinline__ void store4(float* p, float4 a) { *reinterpret_cast<float4*>(p) = a; }

template <typename Out, int K, bool Rms>
__global__ void forward_kernel(const float* __restrict__ x, const Out* __restrict__ branch,
                               const float* __restrict__ w, const float* __restrict__ b, float eps, int64_t N,
                               Out* __restrict__ y, float* __restrict__ h, float* __restrict__ mean,
                               float* __restrict__ rstd) {
  constexpr int C = 128 * K;
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= N) return;
  const float* xr = x + row * C;
  float4 v[K];
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = 4 * (lane + 32 * k);
    v[k] = load4(xr + j);
    if (branch) {  // the residual add: x + branch in fp32, as ATen adds them
      const float4 a = load4(branch + row * C + j);
      v[k] = make_float4(v[k].x + a.x, v[k].y + a.y, v[k].z + a.z, v[k].w + a.w);
      store4(h + row * C + j, v[k]);
    }
    s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
  }
  const float m = Rms ? 0.f : warp_sum(s) / C;
  float q = 0.f;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const float a = v[k].x - m, c = v[k].y - m, d = v[k].z - m, e = v[k].w - m;
    q += (a * a + c * c) + (d * d + e * e);
  }
  const float r = rsqrtf(warp_sum(q) / C + eps);
  Out* yr = y + row * C;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = 4 * (lane + 32 * k);
    const float4 wv = load4(w + j), bv = Rms ? make_float4(0.f, 0.f, 0.f, 0.f) : load4(b + j);
    const float4 n = make_float4((v[k].x - m) * r * wv.x, (v[k].y - m) * r * wv.y, (v[k].z - m) * r * wv.z,
                                 (v[k].w - m) * r * wv.w);
    store4(yr + j, Rms ? n : make_float4(n.x + bv.x, n.y + bv.y, n.z + bv.z, n.w + bv.w));
  }
  if (lane == 0) {
    if (!Rms) mean[row] = m;
    rstd[row] = r;
  }
}

// Rows warp_id, warp_id + warps, ...: dx, and this warp's sums of dy * xhat and dy into row
// warp_id of the partial tables (dweight's, then dbias's P rows later; Rms: dweight's only).
template <typename In, int K, bool Rms>
__global__ void backward_kernel(const In* __restrict__ dy, const float* __restrict__ x,
                                const float* __restrict__ mean, const float* __restrict__ rstd,
                                const float* __restrict__ w, const float* __restrict__ dh, int64_t N,
                                float* __restrict__ dx, In* __restrict__ dbranch,
                                float* __restrict__ partial) {
  constexpr int C = 128 * K;
  const int lane = threadIdx.x % 32;
  const int64_t warp_id = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32,
                warps = static_cast<int64_t>(gridDim.x) * kWarps;
  float4 dg[K], db[K];
#pragma unroll
  for (int k = 0; k < K; ++k) dg[k] = db[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int64_t row = warp_id; row < N; row += warps) {
    const float m = Rms ? 0.f : mean[row], r = rstd[row];
    float4 xh[K], d[K];
    float a = 0.f, c = 0.f;  // sum over the row of (w dy) xhat and of w dy
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = 4 * (lane + 32 * k);
      const float4 xv = load4(x + row * C + j), wv = load4(w + j);
      d[k] = load4(dy + row * C + j);
      xh[k] = make_float4((xv.x - m) * r, (xv.y - m) * r, (xv.z - m) * r, (xv.w - m) * r);
      dg[k].x += d[k].x * xh[k].x, dg[k].y += d[k].y * xh[k].y, dg[k].z += d[k].z * xh[k].z,
          dg[k].w += d[k].w * xh[k].w;
      db[k].x += d[k].x, db[k].y += d[k].y, db[k].z += d[k].z, db[k].w += d[k].w;
      d[k] = make_float4(d[k].x * wv.x, d[k].y * wv.y, d[k].z * wv.z, d[k].w * wv.w);  // now w dy
      a += (d[k].x * xh[k].x + d[k].y * xh[k].y) + (d[k].z * xh[k].z + d[k].w * xh[k].w);
      c += (d[k].x + d[k].y) + (d[k].z + d[k].w);
    }
    a = warp_sum(a) / C;
    c = Rms ? 0.f : warp_sum(c) / C;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int j = 4 * (lane + 32 * k);
      float4 o = make_float4(r * (d[k].x - xh[k].x * a - c), r * (d[k].y - xh[k].y * a - c),
                             r * (d[k].z - xh[k].z * a - c), r * (d[k].w - xh[k].w * a - c));
      if (dh) {  // the residual sum's own gradient
        const float4 g = load4(dh + row * C + j);
        o = make_float4(o.x + g.x, o.y + g.y, o.z + g.z, o.w + g.w);
      }
      store4(dx + row * C + j, o);
      if (dbranch) store4(dbranch + row * C + j, o);
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int j = 4 * (lane + 32 * k);
    store4(partial + warp_id * C + j, dg[k]);
    if (!Rms) store4(partial + (warps + warp_id) * C + j, db[k]);
  }
}

// out[t][col] = sum over p of partial[t][p][col] for the table t = blockIdx.y: 32 columns per
// block, its 32 rows of threads each summing every 32nd partial row, then one thread per
// column adding those 32 in order.
__global__ void sum_partials_kernel(const float* __restrict__ partial, int64_t P, int64_t C,
                                    float* __restrict__ dweight, float* __restrict__ dbias) {
  __shared__ float s[32][33];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const float* table = partial + static_cast<int64_t>(blockIdx.y) * P * C;
  float acc = 0.f;
  if (col < C)
    for (int64_t p = threadIdx.y; p < P; p += 32) acc += table[p * C + col];
  s[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < C) {
    float t = 0.f;
    for (int i = 0; i < 32; ++i) t += s[i][threadIdx.x];
    (blockIdx.y == 0 ? dweight : dbias)[col] = t;
  }
}

// t contiguous and 16-byte aligned (a copy where it is not: a parameter may be a view into a
// ZeRO-3 bucket at any offset), for the kernels' vector loads.
at::Tensor aligned(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0 ? c : c.clone();
}

// f.template operator()<T>() for the output's (or gradient's) dtype: fp32, bf16 or fp16.
template <typename F>
void with_type(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat:
      return f.template operator()<float>();
    case at::kBFloat16:
      return f.template operator()<at::BFloat16>();
    case at::kHalf:
      return f.template operator()<at::Half>();
    default:
      TORCH_CHECK(false, "layer_norm_to: no CUDA kernel for ", t, " (fp32, bf16 or fp16)");
  }
}

// f.template operator()<Rms>() for the norm: RMSNorm where there is no bias.
template <typename F>
void with_norm(bool rms, F&& f) {
  if (rms) return f.template operator()<true>();
  return f.template operator()<false>();
}

// f.template operator()<K>() for K = C / 128 in 1..8.
template <typename F>
void with_k(int64_t C, F&& f) {
  switch (C / 128) {
    case 1:
      return f.template operator()<1>();
    case 2:
      return f.template operator()<2>();
    case 3:
      return f.template operator()<3>();
    case 4:
      return f.template operator()<4>();
    case 5:
      return f.template operator()<5>();
    case 6:
      return f.template operator()<6>();
    case 7:
      return f.template operator()<7>();
    case 8:
      return f.template operator()<8>();
    default:
      TORCH_CHECK(false, "layer_norm_to: no CUDA kernel for rows of ", C);
  }
}

// f.template operator()<T, K, Rms>() for a kernel's dtype, row length and norm (the three above).
template <typename F>
void dispatch(at::ScalarType t, int64_t C, bool rms, F&& f) {
  with_type(t, [&]<typename T>() {
    with_k(C, [&]<int K>() { with_norm(rms, [&]<bool Rms>() { f.template operator()<T, K, Rms>(); }); });
  });
}

}  // namespace

void forward_cuda(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                  at::Tensor& y, at::Tensor& mean, at::Tensor& rstd, const at::Tensor& branch,
                  at::Tensor& h) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), C = x.size(1);
  if (N == 0) return;
  const auto stream = at::cuda::getCurrentCUDAStream();
  const bool rms = !bias.defined();
  const at::Tensor xa = aligned(x), w = aligned(weight), b = rms ? at::Tensor() : aligned(bias);
  const at::Tensor ba = branch.defined() ? aligned(branch) : at::Tensor();
  const unsigned blocks = static_cast<unsigned>((N + kWarps - 1) / kWarps);
  dispatch(y.scalar_type(), C, rms, [&]<typename scalar_t, int K, bool Rms>() {
    forward_kernel<scalar_t, K, Rms><<<blocks, kWarps * 32, 0, stream>>>(
        xa.data_ptr<float>(), ba.defined() ? ba.data_ptr<scalar_t>() : nullptr, w.data_ptr<float>(),
        Rms ? nullptr : b.data_ptr<float>(), static_cast<float>(eps), N, y.data_ptr<scalar_t>(),
        ba.defined() ? h.data_ptr<float>() : nullptr, Rms ? nullptr : mean.data_ptr<float>(),
        rstd.data_ptr<float>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void backward_cuda(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
                   const at::Tensor& weight, at::Tensor& dx, at::Tensor& dweight, at::Tensor& dbias,
                   const at::Tensor& dh, at::Tensor& dbranch) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int64_t N = x.size(0), C = x.size(1);
  const bool rms = !dbias.defined();
  if (N == 0) {
    dweight.zero_();
    if (!rms) dbias.zero_();
    return;
  }
  const auto stream = at::cuda::getCurrentCUDAStream();
  const at::Tensor dya = aligned(dy), xa = aligned(x), w = aligned(weight);
  const at::Tensor dha = dh.defined() ? aligned(dh) : at::Tensor();
  // As many blocks as fit on the GPU at once, each warp many rows: the partial tables (a row
  // per warp) stay small, in L2.
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  int64_t P = 0;
  at::Tensor partial;
  dispatch(dy.scalar_type(), C, rms, [&]<typename scalar_t, int K, bool Rms>() {
    int resident = 1;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, backward_kernel<scalar_t, K, Rms>,
                                                                 kWarps * 32, 0));
    const int64_t blocks = std::min<int64_t>((N + kWarps - 1) / kWarps, std::max(resident, 1) * sms);
    P = blocks * kWarps;
    partial = at::empty({Rms ? 1 : 2, P, C}, x.options());
    backward_kernel<scalar_t, K, Rms><<<static_cast<unsigned>(blocks), kWarps * 32, 0, stream>>>(
        dya.data_ptr<scalar_t>(), xa.data_ptr<float>(), Rms ? nullptr : mean.data_ptr<float>(),
        rstd.data_ptr<float>(), w.data_ptr<float>(), dha.defined() ? dha.data_ptr<float>() : nullptr, N,
        dx.data_ptr<float>(), dbranch.defined() ? dbranch.data_ptr<scalar_t>() : nullptr,
        partial.data_ptr<float>());
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  sum_partials_kernel<<<dim3(static_cast<unsigned>((C + 31) / 32), rms ? 1 : 2), dim3(32, 32), 0, stream>>>(
      partial.data_ptr<float>(), P, C, dweight.data_ptr<float>(), rms ? nullptr : dbias.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fused_ln_detail

}  // namespace ddptrain
