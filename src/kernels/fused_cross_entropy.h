// Note [Fused cross-entropy]
// The language models' loss over (N, V) logits without the eager path's fp32 copies: eager
// cross_entropy under bf16 autocast runs nll_loss in fp32, so the whole log-probability tensor
// is materialised in fp32 (13 GB for GPT-2 124M at 64 x 1024 tokens) and backward builds a
// dense fp32 gradient, cast back to bf16. fused_cross_entropy reads the logits in their own
// dtype (bf16, fp16 or fp32; rows may be strided, as the real-vocabulary view of a padded
// vocabulary is), keeps per row only its log-sum-exp (fp32), reduces the loss in fp32, and in
// backward writes the gradient of the logits into the logits' own memory, in their dtype, where
// nothing else needs them after the loss (gradient_may_overwrite: the language models' output
// layer, whose backward needs its input and weight, not its output); elsewhere (a module of the
// user's ending in log_softmax, whose backward reads its result) into memory of its own. The forward also
// counts the rows whose largest logit is their target (the accuracy, read before backward). Forward: loss_i =
// lse_i - x_{i,t_i}, mean over rows; backward: d x_ij = (exp(x_ij - lse_i) - [j = t_i]) * dloss / N. Two
// implementations of the same arithmetic: on CUDA one kernel per pass (a block per row, fp32 accumulation:
// fused_cross_entropy_cuda.cu), on the CPU ATen ops over chunks of rows (each chunk converted to fp32 at most
// once, so memory stays bounded). The CPU path is the reference tests/unit/test_fused_loss.cpp compares with
// the eager loss and tests/cuda with the kernel. Targets must be in [0, V): checked on the CPU; on CUDA a
// kernel assertion.
#pragma once

#include <utility>

#include <ATen/core/Tensor.h>

namespace ddptrain {

/// Mean cross-entropy of `logits` (N, V) against `targets` (N) int64, as a 0-dim fp32 tensor,
/// differentiable in `logits` (whose memory its backward overwrites with the gradient).
at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets);

/// fused_cross_entropy, and from the same pass the rows whose largest logit is at their
/// target (a 0-dim int64 tensor: what logits.argmax(-1).eq(targets).sum() counts, the first of
/// equal largest values winning), the accuracy's count without reading the logits again. A row
/// with a NaN or only -inf counts no hit (argmax would pick the NaN, or 0); its loss is not
/// finite either.
std::pair<at::Tensor, at::Tensor> fused_cross_entropy_and_hits(const at::Tensor& logits,
                                                               const at::Tensor& targets);

/// Whether backward may write the gradient over `logits` (see the Note): they come, through
/// views, from an op whose backward does not read its result (a matrix product or linear layer,
/// an elementwise op that saves only its inputs, a cast); not a leaf, not an op such as
/// log_softmax, softmax, tanh or sigmoid whose backward reads its output.
bool gradient_may_overwrite(const at::Tensor& logits);

/// Whether this build has the CUDA kernels (CUDA logits without them: an error naming the fix).
bool fused_cross_entropy_has_cuda();

namespace fused_ce_detail {
// The passes, per device (the CUDA ones in fused_cross_entropy_cuda.cu when built with CUDA).
// lse (N) fp32, the per-row losses (N) fp32 and hits (N) int64 (1 where the row's first largest
// logit is its target).
void forward_cpu(const at::Tensor& logits, const at::Tensor& targets, at::Tensor& lse, at::Tensor& losses,
                 at::Tensor& hits);
// logits <- (softmax - onehot) * scale, in place (scale: dloss / N, a 0-dim fp32 tensor).
void backward_cpu(at::Tensor& logits, const at::Tensor& targets, const at::Tensor& lse,
                  const at::Tensor& scale);
void forward_cuda(const at::Tensor& logits, const at::Tensor& targets, at::Tensor& lse, at::Tensor& losses,
                  at::Tensor& hits);
void backward_cuda(at::Tensor& logits, const at::Tensor& targets, const at::Tensor& lse,
                   const at::Tensor& scale);
}  // namespace fused_ce_detail

}  // namespace ddptrain
