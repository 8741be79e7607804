#include "models/vocab_padding.h"

#include <torch/csrc/autograd/custom_function.h>

namespace ddptrain {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// See Note [Padded vocabulary]: narrow's forward; a backward that keeps a gradient already in
// the padded output's memory where it is.
struct RealVocabView : torch::autograd::Function<RealVocabView> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& padded, int64_t vocab) {
    // The padded output's place, not the tensor: holding it would keep the logits alive for an
    // eager loss that has made its own fp32 copy.
    ctx->saved_data["address"] = reinterpret_cast<int64_t>(padded.data_ptr());
    ctx->saved_data["sizes"] = padded.sizes().vec();
    ctx->saved_data["strides"] = padded.strides().vec();
    ctx->saved_data["vocab"] = vocab;
    return padded.narrow(-1, 0, vocab);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& grad = grads[0];
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const std::vector<int64_t> strides = ctx->saved_data["strides"].toIntVector();
    const int64_t vocab = ctx->saved_data["vocab"].toInt(), rows = sizes.back();
    if (in_padded_memory(grad, ctx->saved_data["address"].toInt(), sizes, strides)) {
      // The same memory as a tensor of its own (not a view of the loss's saved logits, whose
      // base it modified in place).
      at::Tensor full =
          at::empty({0}, grad.options()).set_(grad.storage(), grad.storage_offset(), sizes, strides);
      full.narrow(-1, vocab, rows - vocab).zero_();
      return {full, at::Tensor()};
    }
    at::Tensor full = at::zeros(sizes, grad.options());
    full.narrow(-1, 0, vocab).copy_(grad);
    return {full, at::Tensor()};
  }

  // Whether `grad` is the padded output's real columns in that output's own memory (its
  // storage holds the whole padded layout at the same address, with the same strides).
  static bool in_padded_memory(const at::Tensor& grad, int64_t address, const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& strides) {
    if (!grad.defined() || !grad.has_storage() || reinterpret_cast<int64_t>(grad.data_ptr()) != address)
      return false;
    if (grad.strides().vec() != strides) return false;
    int64_t last = 0;  // the offset of the padded layout's last element
    for (size_t d = 0; d < sizes.size(); ++d) last += (sizes[d] - 1) * strides[d];
    const int64_t needed = (grad.storage_offset() + last + 1) * static_cast<int64_t>(grad.element_size());
    return static_cast<int64_t>(grad.storage().nbytes()) >= needed;
  }
};

}  // namespace

at::Tensor real_vocab_logits(const at::Tensor& logits, int64_t vocab) {
  if (logits.size(-1) == vocab) return logits;
  return RealVocabView::apply(logits, vocab);
}

}  // namespace ddptrain
