// Note [Channels last]: MiniResNet's weights and images are NHWC in memory by default
// (--memory_format auto): oneDNN's CPU convolutions (and cuDNN's tensor cores) work in that
// layout, so NCHW tensors cost a reorder at every convolution; measured with the same
// LibTorch on this CPU: 1.28x faster steps at width 0.25, 1.09x at width 1.0. Logical shapes
// and values are unchanged (only strides differ), checkpoints are written contiguous, and
// results differ from the NCHW layout only by float summation order.
//
// Model: what the trainer needs of any model, and nothing of distribution or precision
// (../shared/STYLE.md, 9). MiniResNet (images -> class logits) and Gpt (tokens -> next-token
// logits) implement it; build_model.h picks one from the options.
#pragma once

#include <cstdint>
#include <string>

#include <torch/nn/module.h>

#include "ddp/units.h"

namespace ddptrain {

class Model : public torch::nn::Module {
 public:
  /// Logits: (B, classes) for images (B, C, H, W); (B, T, vocab) for tokens (B, T).
  virtual at::Tensor forward(const at::Tensor& x) = 0;
  /// Model FLOPs of one training sample (forward and backward), the MFU numerator.
  virtual int64_t train_flops_per_sample() const = 0;
  /// For the log, e.g. "gpt (12 layers, 12 heads, 768 wide, block 1024, vocab 50257)".
  virtual std::string describe() const = 0;
  /// The parts full sharding gathers one at a time (Note [Units]); none: one root unit.
  Units& units() { return units_; }

 protected:
  /// sink: gets each unit as it is built (Note [Units sharded as built]); may be null.
  explicit Model(UnitSink* sink = nullptr) : units_(sink) {}
  Units units_;
};

}  // namespace ddptrain
