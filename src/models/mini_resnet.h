// MiniResNet: the reference pipeline's model, a small ResNet for 32x32 (or 28x28) images.
// stem: conv3x3(in, 64) + BN + ReLU; stages: six BasicBlocks (64, 64, 128/2, 128, 256/2, 256)
// in ONE flat Sequential; global average pool; Linear(256, classes). Submodule names match
// the Python module, so state_dict keys are identical (`stem.0.weight`, `stages.2.shortcut.0
// .weight`, `fc.bias`) and creation order matches, so torch::manual_seed(S) gives the same
// initial weights as Python. `width` scales every channel count. Knows nothing of
// distribution or precision (see ../shared/STYLE.md, 9).
#pragma once

#include <torch/nn/module.h>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "models/model.h"

namespace ddptrain {

/// Makes a 2-d normalisation layer over `channels` (default: BatchNorm2d). The layer must
/// have BatchNorm2d's parameters and buffers, so state_dict keys stay the same.
using NormFactory = std::function<torch::nn::AnyModule(int64_t channels)>;
torch::nn::AnyModule default_norm(int64_t channels);

struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(int64_t in_ch, int64_t out_ch, int64_t stride, const NormFactory& norm,
                 double dropout = 0.0);
  torch::Tensor forward(const torch::Tensor& x);

  double dropout = 0.0;  // after the first conv-BN-ReLU; 0 in the reference model
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::AnyModule bn1, bn2;
  torch::nn::Sequential shortcut{nullptr};  // null: identity
};
TORCH_MODULE(BasicBlock);

struct MiniResNetOptions {
  int64_t in_channels = 3;
  int64_t num_classes = 10;
  double width = 1.0;
  NormFactory norm = default_norm;
  double dropout = 0.0;           // inside each block (not in the reference model)
  bool recompute_blocks = false;  // recompute each block's activations in backward (models/recompute.h)
  int64_t image_height = 32;      // the input size: only for train_flops_per_sample()
  int64_t image_width = 32;
};

/// One row of the model's layer table: what `ddptrain inspect model` prints.
struct LayerInfo {
  std::string name;                // state_dict prefix, e.g. stages.2.conv1
  std::string kind;                // conv3x3/s2, linear, ...
  std::vector<int64_t> out_shape;  // per sample: (C, H, W) or (features)
  int64_t params = 0;
  int64_t forward_flops = 0;  // 2 x multiply-accumulates, per sample
};

struct MiniResNetImpl : Model {
  explicit MiniResNetImpl(const MiniResNetOptions& opts);
  torch::Tensor forward(const torch::Tensor& x) override;
  /// At the options' image size.
  int64_t train_flops_per_sample() const override;
  std::string describe() const override;

  /// The convolutions and the linear layer, in execution order, for (C, h, w) inputs.
  /// FLOPs are analytic (2·MACs of conv and linear layers; normalisation, activations and
  /// additions are not counted, the usual MFU convention).
  std::vector<LayerInfo> layer_table(int64_t h, int64_t w) const;
  /// Training FLOPs per sample: 3 x forward (backward costs two forwards).
  int64_t train_flops_per_sample(int64_t h, int64_t w) const;

  torch::nn::Sequential stem{nullptr};
  torch::nn::Sequential stages{nullptr};
  torch::nn::Linear fc{nullptr};
  bool recompute_blocks = false;
  MiniResNetOptions opts;
};
TORCH_MODULE(MiniResNet);

/// Channels after the width multiplier (at least 1).
int64_t scaled_channels(int64_t base, double width);

/// Number of trainable parameters.
int64_t count_parameters(const torch::nn::Module& m);

}  // namespace ddptrain
