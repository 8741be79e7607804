// Note [Linear epilogues in cuBLASLt]
// A GEMM on Hopper runs near the tensor cores' peak; the passes around it run at memory speed.
// GPT-2 124M's step (GPU check of 2026-12-04, bf16, batch 64 x 1024, one H200) spent 7.6 ms on
// the MLP's GELU (3.2 forward, 4.5 backward: each a full pass over the 4C-wide activation) and
// 4.1 ms on the biases' gradients (a column sum over every Linear's output gradient), next to
// ~63 ms of GEMMs. cuBLASLt can do that work in the GEMM's epilogue, where the tile is already in
// registers (llm.c's matmul_cublaslt does the same):
//  - forward, c_fc: GELU_AUX_BIAS writes gelu(x W^T + b) and the pre-activation (kept for
//    backward, as eager keeps it) from one GEMM;
//  - backward, c_proj's input gradient: DGELU_BGRAD multiplies by GELU's derivative at the kept
//    pre-activation and sums c_fc's bias gradient, so the GEMM hands on c_fc's output gradient;
//  - backward, every weight gradient with a bias: BGRADB sums the bias's gradient from the
//    output gradient the GEMM reads anyway.
// cuBLASLt's GELU is the tanh form (GPT-2's gelu_new), so the first two serve
// `--gpt_activation gelu_tanh` only; the exact GELU keeps ATen's passes and gets the third.
// The operands are what at::linear multiplies under autocast (cast to its dtype: bf16 or fp16);
// the epilogues compute in fp32 from the GEMM's accumulator and round once, where eager rounds
// the GEMM's output first, so results differ from ATen's by a rounding (tests/cuda bounds it).
// Where cuBLASLt offers no algorithm for an epilogue (heuristic empty), that GEMM runs ATen's
// ops instead; the CUDA test asserts cuBLASLt takes all three at GPT-2's sizes. The descriptors are
// built in row-major terms by the functions below and checked on CPU against
// lt_matmul_reference, cuBLASLt's documented arithmetic in ATen ops (FusedLinear.* tests): the
// layouts, transposes and leading dimensions are what a GPU would get wrong silently.
#pragma once

#include <ATen/core/Tensor.h>

namespace ddptrain {

/// at::linear(x, weight, bias) (weight (out, in), bias (out) or undefined), under autocast in its
/// dtype; on CUDA in bf16 or fp16, its backward takes the bias's gradient from the weight
/// gradient's GEMM (see the Note). Elsewhere at::linear itself.
at::Tensor linear_with_epilogues(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

/// GPT's MLP without its dropout: c_proj(gelu(c_fc(x))), weights (4C, C) and (C, 4C) with biases,
/// GELU in its tanh form if `gelu_tanh`. On CUDA in bf16 or fp16 (autocast's dtype) through the
/// epilogues of the Note; elsewhere at::linear and at::gelu.
at::Tensor gelu_mlp_with_epilogues(const at::Tensor& x, const at::Tensor& w_fc, const at::Tensor& b_fc,
                                   const at::Tensor& w_proj, const at::Tensor& b_proj, bool gelu_tanh);

/// Whether this build has cuBLASLt's epilogues (a CUDA build with ddptrain's kernels).
bool fused_linear_has_cuda();

namespace fused_linear_detail {

enum class Epilogue { kNone, kBias, kGeluAuxBias, kDGeluBGrad, kBGradB };

/// One cublasLtMatmul in cuBLASLt's own column-major terms: D (m x n, leading dimension ldd) =
/// op(A) (m x k) · op(B) (k x n), A stored as (lda x ...) with op = transpose if trans_a, then the
/// epilogue. bias: added per row of D (kBias, kGeluAuxBias; length m), or written: the sum over
/// D's columns of the epilogue's output (kDGeluBGrad; length m) or over op(B)'s rows (kBGradB;
/// length n). aux: the pre-activation (m x n, leading dimension aux_ld), written by
/// kGeluAuxBias and read by kDGeluBGrad. Every tensor is contiguous in one dtype.
struct LtGemm {
  at::Tensor a, b, d, bias, aux;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0, aux_ld = 0;
  Epilogue epilogue = Epilogue::kNone;
};

// The three GEMMs of the Note, asked in row-major terms (rows = tokens):
/// g (N, O) = gelu_tanh(x (N, K) · w (O, K)^T + b (O)), pre (N, O) the pre-activation.
LtGemm gelu_bias_forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& g,
                         const at::Tensor& pre);
/// dw (O, K) = dy (N, O)^T · x (N, K) and db (O) = the column sums of dy.
LtGemm weight_grad_with_bias(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& dw,
                             const at::Tensor& db);
/// dh (N, K) = (dy (N, O) · w (O, K)) ⊙ gelu_tanh'(pre (N, K)), db (K) = the column sums of dh.
LtGemm dgelu_input_grad(const at::Tensor& dy, const at::Tensor& w, const at::Tensor& pre,
                        const at::Tensor& dh, const at::Tensor& db);

/// Runs `g` on its CUDA tensors through cuBLASLt on torch's handle, stream and workspace; false
/// where cuBLASLt has no algorithm for it (nothing written) or the build has no kernels.
bool lt_matmul(const LtGemm& g);

/// What cuBLASLt's documentation says `g` computes, in ATen ops on any device (CPU in the tests).
void lt_matmul_reference(const LtGemm& g);

/// How the Functions below run their epilogue GEMMs: kEpilogues through lt_matmul on CUDA tensors
/// and lt_matmul_reference on others; kAten through the ATen ops that stand in where cuBLASLt
/// has no algorithm (so the tests run that path too).
enum class GemmPath { kEpilogues, kAten };

/// The MLP and the Linear through the epilogues on any device, as the public functions take them
/// on CUDA (so the CPU tests run the same autograd Functions). Operands already in the GEMM's
/// dtype.
at::Tensor gelu_mlp_function(const at::Tensor& x, const at::Tensor& w_fc, const at::Tensor& b_fc,
                             const at::Tensor& w_proj, const at::Tensor& b_proj,
                             GemmPath path = GemmPath::kEpilogues);
at::Tensor linear_function(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           GemmPath path = GemmPath::kEpilogues);

}  // namespace fused_linear_detail

}  // namespace ddptrain
