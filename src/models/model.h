// Model: what the trainer needs of any model, and nothing of distribution or precision
// (../shared/STYLE.md, 9). MiniResNet (images -> class logits) and Gpt (tokens -> next-token
// logits) implement it; build_model.h picks one from the options.
#pragma once

#include <cstdint>
#include <string>

#include <torch/nn/module.h>

namespace ddptrain {

class Model : public torch::nn::Module {
 public:
  /// Logits: (B, classes) for images (B, C, H, W); (B, T, vocab) for tokens (B, T).
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  /// Model FLOPs of one training sample (forward and backward), the MFU numerator.
  virtual int64_t train_flops_per_sample() const = 0;
  /// For the log, e.g. "gpt (12 layers, 12 heads, 768 wide, block 1024, vocab 50257)".
  virtual std::string describe() const = 0;
};

}  // namespace ddptrain
