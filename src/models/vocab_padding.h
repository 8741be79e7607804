// Note [Padded vocabulary]
// --vocab_multiple N (gpt, llama): the token embedding and output rows are rounded up to a
// multiple of N (64: 50257 -> 50304 for GPT-2), so the output layer's GEMMs have aligned leading
// dimensions on a GPU (an odd vocabulary sends bf16 GEMMs to unaligned kernels). The model is
// built exactly as unpadded (the same random draws, so the same initial weights and every later
// draw), then the rows are appended as zeros; forward returns the logits of the real vocabulary
// only (a view), so the loss, accuracy and every output equal the unpadded model's up to the
// GEMM's rounding, the padded rows are never targets, get no gradient and stay zero (weight
// decay keeps zero at zero). Checkpoints hold the padded rows and the run's vocab_size and
// vocab_multiple; Hugging Face imports pad and exports drop them (models/hf_model.cpp). MFU
// counts the real vocabulary's FLOPs.
// The view's backward (vocab_padding.cpp) would be narrow's: a zero-filled gradient of the
// padded shape and a copy of the real columns into it, two passes over the logits (7.6 ms
// of GPT-2 124M's step at batch 64 x 1024 on an H200). When the gradient it gets lives in the
// padded output's own memory, as the fused loss leaves it (Note [Fused cross-entropy] writes
// the gradient over the logits), it zeroes the padded columns there and hands that memory
// on: no new tensor, no copy. Any other gradient takes narrow's way.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace ddptrain {

/// vocab rounded up to a multiple of `multiple` (>= 1).
inline int64_t padded_vocab(int64_t vocab, int64_t multiple) {
  return (vocab + multiple - 1) / multiple * multiple;
}

/// A (vocab, C) tensor with zero rows appended up to `rows` (itself when it has as many).
inline at::Tensor with_vocab_rows(const at::Tensor& weight, int64_t rows) {
  if (weight.size(0) >= rows) return weight;
  torch::NoGradGuard no_grad;
  return at::cat({weight.detach(), at::zeros({rows - weight.size(0), weight.size(1)}, weight.options())});
}

/// Pads a (vocab, C) parameter to `rows` in place of its data (the same Parameter object:
/// set_data keeps the module's and the optimizer's hold on it).
inline void pad_vocab_rows(const at::Tensor& weight, int64_t rows) {
  if (weight.size(0) < rows) const_cast<at::Tensor&>(weight).set_data(with_vocab_rows(weight, rows));
}

/// The real vocabulary's logits of a padded output: a view of the first `vocab` of the last
/// dimension, differentiable (its backward reuses an in-place gradient, see the Note).
at::Tensor real_vocab_logits(const at::Tensor& logits, int64_t vocab);

}  // namespace ddptrain
