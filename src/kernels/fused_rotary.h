// Note [Rotary in one pass]
// Llama rotates each query and key as transformers does (models/llama.h): the bf16 head in
// fp32, x·cos + rotate_half(x)·sin, cast back. In ATen ops that is eight passes over a tensor
// the size of q (a cast, a negation, a concatenation, two products, a sum, a cast back), and
// more in backward: at GPT-2 124M's sizes, batch 64 x 1024, about 60 GB of memory traffic per
// step forward alone, by the byte count. rotary() computes the same on CUDA in one kernel each
// way: each thread reads the pair (i, i + d/2) of a head's row once, rotates it in fp32 with
// every product and sum rounded on its own (no fused multiply-add: the ATen ops' roundings)
// and writes the pair in x's dtype; backward applies the transposed rotation the same way. So
// the kernel's output and gradient are bitwise the ATen ops' (tests/cuda; up to the sign of a
// zero gradient: ATen's sum of the slices' gradients turns -0 into +0), and the CPU (and a
// build without the kernels) runs the ATen ops themselves.
#pragma once

#include <ATen/core/Tensor.h>

namespace ddptrain {

/// x (B, H, T, D) of fp32, bf16 or fp16, rotated by cos and sin (T, D) fp32 (position by
/// dimension, transformers' cat(freqs, freqs) layout): (x·cos + rotate_half(x)·sin) computed in
/// fp32 and written in x's dtype, contiguous; differentiable in x.
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

/// Whether this build has rotary's CUDA kernels.
bool fused_rotary_has_cuda();

namespace fused_rotary_detail {
// out (B, H, T, D) contiguous, in x's dtype, from x (last dimension contiguous): the rotation,
// or with `transpose` its transpose (backward: x is then the output's gradient).
void rotate_cuda(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool transpose,
                 at::Tensor& out);
}  // namespace fused_rotary_detail

}  // namespace ddptrain
