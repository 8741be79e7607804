// Note [SwiGLU in one pass]
// Llama's MLP is down(silu(gate(x)) * up(x)), gate and up computed as one GEMM (linear_stacked:
// gate's columns first). In ATen ops that is a silu pass and a product pass forward over the
// (tokens x intermediate) activations, and backward two products, silu's backward and the
// concatenation of the halves' gradients: about 18 reads or writes of a (tokens x intermediate)
// tensor per layer, 10 more than one pass each way needs (at GPT-2 124M's sizes, batch 64 x 1024,
// intermediate 2048, bf16: about 32 GB of memory traffic per step). swiglu() takes the stacked
// GEMM output and on CUDA runs one kernel each way: forward reads gate and up once and writes the
// product; backward reads the product's gradient, gate and up and writes both halves' gradients
// into one stacked tensor (the GEMM's gradient, no concatenation), recomputing silu instead of
// keeping it. Each value is rounded where ATen's ops round it (silu written in the input's dtype,
// then the product; backward the product's gradient rounded before silu's backward, in ATen's own
// expressions), so the kernels' results are ATen's CUDA ops' (tests/cuda compares them bit for
// bit; a first-order backward: a double backward is refused); the CPU (and a build without the
// kernels) runs the ATen ops themselves.
#pragma once

#include <ATen/core/Tensor.h>

namespace ddptrain {

/// silu(gate) * up for gate_up (..., 2F) of fp32, bf16 or fp16 holding gate's F columns then
/// up's (as linear_stacked({gate, up}) writes them): (..., F) in gate_up's dtype; differentiable
/// in gate_up.
at::Tensor swiglu(const at::Tensor& gate_up);

/// Whether this build has swiglu's CUDA kernels.
bool fused_swiglu_has_cuda();

namespace fused_swiglu_detail {
// out (rows, F) = silu(gate) * up from gate_up (rows, 2F), both contiguous.
void forward_cuda(const at::Tensor& gate_up, at::Tensor& out);
// dgate_up (rows, 2F) from the product's gradient dout (rows, F) and gate_up, all contiguous.
void backward_cuda(const at::Tensor& dout, const at::Tensor& gate_up, at::Tensor& dgate_up);
}  // namespace fused_swiglu_detail

}  // namespace ddptrain
