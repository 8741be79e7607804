// Note [LayerNorm into the autocast dtype]
// Under bf16 (or fp16) autocast, LayerNorm is on autocast's fp32 list: it reads the fp32
// residual stream and writes an fp32 output, which the next Linear casts to bf16 in a pass of
// its own; backward casts that Linear's bf16 input gradient back to fp32 in another pass, and
// ATen's weight and bias gradients read dy and x once more (GammaBetaBackward). Together 25
// LayerNorms took about 23 ms of GPT-2 124M's step at batch 64 x 1024 on an H200 (GPU check
// 2026-12-04: 4.6 forward, 3.7 + 7.2 backward, plus the casts). layer_norm_to computes the
// same function, the statistics and the normalisation in fp32, and writes the output in the
// autocast dtype directly; its backward takes the gradient in that dtype. On the CPU it is
// ATen's LayerNorm followed by the cast (bitwise what autocast does today: the reference the
// tests compare the CUDA kernels with); on CUDA one kernel each way, a warp per row, and a
// small kernel that sums the weight and bias gradients of the rows in a fixed order (the same
// sums on every run). The CUDA kernels take rows of C <= 1024 fp32 values with C a multiple
// of 128 (GPT-2's 768 and 1024); other shapes take the CPU path's ATen ops on the GPU.
// --fused_norm (models/model_options.h) chooses: auto on CUDA under autocast, on, off (the
// default until a GPU run has checked the CUDA kernels). RMSNorm (Llama's) is the same with no
// mean and no bias: rms_norm_to, the same kernels, and on the CPU the ops transformers' RMSNorm
// runs followed by the cast (bitwise Llama's own RMSNorm under autocast). The residual add
// before a block's second norm (h = x + attention's output) joins the norm's passes
// (add_layer_norm_to, add_rms_norm_to): forward reads x and the bf16 branch once and writes h
// and the norm; backward adds h's own gradient to the norm's and writes the branch's bf16
// gradient in the same pass. Without that, the add was a pass of its own each way (mixed
// dtypes: ATen's unvectorised kernel), plus autograd's sum of h's two gradients and its cast of
// the branch's: together about 7 ms of the profiled step for all 24 residual adds, half of
// them here; the other half, a block's output, joins the next block's first norm (or the
// final norm) the same way (Note [Residual add in the next norm], models/residual.h).
#pragma once

#include <utility>

#include <ATen/core/Tensor.h>

namespace ddptrain {

/// LayerNorm over the last dimension of fp32 `x` with fp32 `weight` and `bias`, its output in
/// `out` (the autocast dtype); differentiable in all three.
at::Tensor layer_norm_to(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                         at::ScalarType out);

/// RMSNorm over the last dimension of fp32 `x` with fp32 `weight` (weight * x / sqrt(mean(x^2)
/// + eps), transformers' LlamaRMSNorm), its output in `out`; differentiable in both.
at::Tensor rms_norm_to(const at::Tensor& x, const at::Tensor& weight, double eps, at::ScalarType out);

/// The residual add before a norm in one pass with it: h = x + branch (fp32 x, the branch in
/// any dtype, added in fp32 as ATen adds them) and layer_norm_to(h) (add_rms_norm_to:
/// rms_norm_to(h)); returns {h, the norm}. Backward gives x h's gradient plus the norm's, and
/// the branch that sum in its dtype, in the norm's backward pass. The same function as the
/// add followed by the norm (on the CPU, those ops themselves).
std::pair<at::Tensor, at::Tensor> add_layer_norm_to(const at::Tensor& x, const at::Tensor& branch,
                                                    const at::Tensor& weight, const at::Tensor& bias,
                                                    double eps, at::ScalarType out);
std::pair<at::Tensor, at::Tensor> add_rms_norm_to(const at::Tensor& x, const at::Tensor& branch,
                                                  const at::Tensor& weight, double eps, at::ScalarType out);

/// transformers' LlamaRMSNorm in ATen ops, for x of any float dtype: x / rms(x) in fp32, cast
/// back to x's dtype, times weight. Llama's own RMSNorm; rms_norm_to's CPU path is this and the
/// cast (so the two are bitwise one function).
at::Tensor rms_norm_ops(const at::Tensor& x, const at::Tensor& weight, double eps);

/// Whether this build has the CUDA kernels of layer_norm_to and rms_norm_to.
bool fused_layer_norm_has_cuda();

/// Whether layer_norm_to (and rms_norm_to) runs its CUDA kernels for `x` and `out` (else ATen's ops): a CUDA
/// tensor, a build with the kernels, rows they take, an output dtype they write.
bool layer_norm_to_uses_kernels(const at::Tensor& x, at::ScalarType out);

namespace fused_ln_detail {
// Whether the CUDA kernels take rows of C values.
inline bool cuda_kernels_take(int64_t C) { return C > 0 && C % 128 == 0 && C <= 1024; }
// y (N, C) in its dtype, mean and rstd (N) fp32, from x (N, C) fp32 contiguous. Without a
// bias: RMSNorm (mean is not written and may be undefined). With a branch (N, C) in y's dtype:
// the norm of x + branch, that sum written into h (N, C) fp32.
void forward_cuda(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                  at::Tensor& y, at::Tensor& mean, at::Tensor& rstd, const at::Tensor& branch, at::Tensor& h);
// dx (N, C) fp32, dweight and dbias (C) fp32, from dy (N, C) in the output's dtype (x: the
// normalised rows, h where there was a branch). dbias undefined: RMSNorm's (mean is not read).
// dh (N, C) fp32, if defined, is added to dx; dbranch, if defined, gets dx in dy's dtype.
void backward_cuda(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
                   const at::Tensor& weight, at::Tensor& dx, at::Tensor& dweight, at::Tensor& dbias,
                   const at::Tensor& dh, at::Tensor& dbranch);
}  // namespace fused_ln_detail

}  // namespace ddptrain
