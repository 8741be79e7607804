// The CUDA kernels of Note [SwiGLU in one pass] (kernels/fused_swiglu.h): a thread per V
// consecutive columns of a row (16 bytes of gate and of up where the width allows), computing
// in ATen's opmath type with ATen's own expressions for silu, silu's backward and the products,
// each result rounded to the tensor's dtype where ATen's ops write it.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAMathCompat.h>

#include <algorithm>
#include <cstdint>

#include "kernels/fused_swiglu.h"

namespace ddptrain {

bool fused_swiglu_has_cuda() { return true; }

namespace fused_swiglu_detail {

namespace {

template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// silu as ATen's CUDA kernel computes it, written in T (the value the forward's product reads and
// the backward's product with the gradient reads: autograd keeps silu's output).
template <typename T>
__device__ __forceinline__ T silu_value(T x) {
  using opmath_t = at::opmath_type<T>;
  const opmath_t x_acc = static_cast<opmath_t>(x);
  return static_cast<T>(x_acc / (opmath_t(1) + ::exp(-x_acc)));
}

// A product as ATen's mul writes it in T.
template <typename T>
__device__ __forceinline__ T product(T a, T b) {
  using opmath_t = at::opmath_type<T>;
  return static_cast<T>(static_cast<opmath_t>(a) * static_cast<opmath_t>(b));
}

// silu's backward as ATen's CUDA kernel computes it (silu_backward(dy, x)).
template <typename T>
__device__ __forceinline__ T silu_grad(T dy, T x) {
  using opmath_t = at::opmath_type<T>;
  const opmath_t dy_acc = static_cast<opmath_t>(dy);
  const opmath_t x_acc = static_cast<opmath_t>(x);
  const opmath_t s_acc = opmath_t(1) / (opmath_t(1) + c10::cuda::compat::exp(-x_acc));
  return static_cast<T>(dy_acc * s_acc * (opmath_t(1) + x_acc * (opmath_t(1) - s_acc)));
}

// Calls body(row, col) for every pack of V columns of a (rows x F) grid, grid-stride. Index:
// uint32_t where every element's index fits (the common case: 64-bit division is slow on a GPU),
// else int64_t.
template <int V, typename Index, typename Body>
__device__ __forceinline__ void for_each_pack(Index rows, Index F, Body&& body) {
  const Index per_row = F / V, total = rows * per_row;
  for (Index p = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; p < total;
       p += static_cast<Index>(gridDim.x) * blockDim.x)
    body(p / per_row, (p % per_row) * V);
}

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, V>*>(p);
}

template <typename T, int V>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, V>& v) {
  *reinterpret_cast<Pack<T, V>*>(p) = v;
}

template <typename T, int V, typename Index>
__global__ void swiglu_forward_kernel(const T* __restrict__ gate_up, T* __restrict__ out, Index rows,
                                      Index F) {
  for_each_pack<V>(rows, F, [&](Index row, Index col) {
    const T* in = gate_up + row * 2 * F + col;
    const Pack<T, V> g = load_pack<T, V>(in), u = load_pack<T, V>(in + F);
    Pack<T, V> o;
#pragma unroll
    for (int i = 0; i < V; ++i) o.v[i] = product(silu_value(g.v[i]), u.v[i]);
    store_pack(out + row * F + col, o);
  });
}

// Autograd of silu(gate) * up: the product's gradient dout times up (rounded) into silu's
// backward for gate; dout times silu(gate) (as kept, in T) for up.
template <typename T, int V, typename Index>
__global__ void swiglu_backward_kernel(const T* __restrict__ dout, const T* __restrict__ gate_up,
                                       T* __restrict__ dgate_up, Index rows, Index F) {
  for_each_pack<V>(rows, F, [&](Index row, Index col) {
    const T* in = gate_up + row * 2 * F + col;
    const Pack<T, V> g = load_pack<T, V>(in), u = load_pack<T, V>(in + F);
    const Pack<T, V> d = load_pack<T, V>(dout + row * F + col);
    Pack<T, V> dg, du;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      dg.v[i] = silu_grad(product(d.v[i], u.v[i]), g.v[i]);
      du.v[i] = product(d.v[i], silu_value(g.v[i]));
    }
    T* grad = dgate_up + row * 2 * F + col;
    store_pack(grad, dg);
    store_pack(grad + F, du);
  });
}

// Runs `launch.template operator()<V, Index>()` with 16-byte packs where every row's halves
// start on 16 bytes (F a multiple of the pack, aligned bases), else element by element; 32-bit
// indices where rows x 2F elements fit in them.
template <typename T, typename Launch>
void with_pack(int64_t rows, int64_t F, std::initializer_list<const void*> bases, Launch&& launch) {
  constexpr int kWide = 16 / sizeof(T);
  bool wide = F % kWide == 0;
  for (const void* b : bases) wide = wide && reinterpret_cast<uintptr_t>(b) % 16 == 0;
  const bool narrow_index = rows * 2 * F < (int64_t{1} << 31);
  if (wide && narrow_index) return launch.template operator()<kWide, uint32_t>();
  if (wide) return launch.template operator()<kWide, int64_t>();
  if (narrow_index) return launch.template operator()<1, uint32_t>();
  launch.template operator()<1, int64_t>();
}

unsigned blocks_for(int64_t packs, int threads) {
  return static_cast<unsigned>(std::min<int64_t>((packs + threads - 1) / threads, int64_t{1} << 20));
}

// float, bf16 and fp16 (the dtypes swiglu takes to the kernels).
#define DDPTRAIN_SWIGLU_DISPATCH(TYPE, NAME, ...)                                                           \
  AT_DISPATCH_SWITCH(TYPE, NAME,                                                                            \
                     AT_DISPATCH_CASE(at::kFloat, __VA_ARGS__) AT_DISPATCH_CASE(at::kBFloat16, __VA_ARGS__) \
                         AT_DISPATCH_CASE(at::kHalf, __VA_ARGS__))

}  // namespace

void forward_cuda(const at::Tensor& gate_up, at::Tensor& out) {
  const c10::cuda::CUDAGuard guard(gate_up.device());
  const int64_t rows = gate_up.size(0), F = gate_up.size(1) / 2;
  if (rows * F == 0) return;
  constexpr int kThreads = 256;
  const auto stream = at::cuda::getCurrentCUDAStream();
  DDPTRAIN_SWIGLU_DISPATCH(gate_up.scalar_type(), "swiglu", [&] {
    const scalar_t* in = gate_up.data_ptr<scalar_t>();
    scalar_t* o = out.data_ptr<scalar_t>();
    with_pack<scalar_t>(rows, F, {in, o}, [&]<int V, typename Index>() {
      swiglu_forward_kernel<scalar_t, V, Index><<<blocks_for(rows * F / V, kThreads), kThreads, 0, stream>>>(
          in, o, static_cast<Index>(rows), static_cast<Index>(F));
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

void backward_cuda(const at::Tensor& dout, const at::Tensor& gate_up, at::Tensor& dgate_up) {
  const c10::cuda::CUDAGuard guard(gate_up.device());
  const int64_t rows = gate_up.size(0), F = gate_up.size(1) / 2;
  if (rows * F == 0) return;
  constexpr int kThreads = 256;
  const auto stream = at::cuda::getCurrentCUDAStream();
  DDPTRAIN_SWIGLU_DISPATCH(gate_up.scalar_type(), "swiglu_backward", [&] {
    const scalar_t* d = dout.data_ptr<scalar_t>();
    const scalar_t* in = gate_up.data_ptr<scalar_t>();
    scalar_t* g = dgate_up.data_ptr<scalar_t>();
    with_pack<scalar_t>(rows, F, {d, in, g}, [&]<int V, typename Index>() {
      swiglu_backward_kernel<scalar_t, V, Index><<<blocks_for(rows * F / V, kThreads), kThreads, 0, stream>>>(
          d, in, g, static_cast<Index>(rows), static_cast<Index>(F));
    });
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace fused_swiglu_detail

}  // namespace ddptrain
