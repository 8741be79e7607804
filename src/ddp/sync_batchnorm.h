// SyncBatchNorm: BatchNorm whose training statistics are over the global batch of all ranks,
// forward and backward (PyTorch's nn.SyncBatchNorm). Same parameters and buffers as
// BatchNorm2d (weight, bias, running_mean, running_var, num_batches_tracked), so state_dicts
// are interchangeable. In eval mode, or with one rank, it is plain batch_norm.
// Forward all-reduces per-channel (sum, sum of squares, count) in float64; backward
// all-reduces (sum dy, sum dy*(x-mean)). grad_weight and grad_bias stay local: DDP averages
// them like any gradient, which gives exactly the single-process gradient of the mean loss.
// Invariant: every rank runs the same SyncBatchNorm layers in the same order (forward and
// backward), since each issues a collective.
#pragma once

#include <functional>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/any.h>

#include "dist/dist_context.h"

namespace ddptrain {

struct SyncBatchNormImpl : torch::nn::Cloneable<SyncBatchNormImpl> {
  SyncBatchNormImpl(int64_t channels, const DistContext& ctx, double eps = 1e-5, double momentum = 0.1);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

  int64_t channels;
  double eps, momentum;
  const DistContext* ctx;
  torch::Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};
TORCH_MODULE(SyncBatchNorm);

/// Makes SyncBatchNorm layers over ctx: a models/mini_resnet.h NormFactory (the model's `norm`
/// option), which is this function type, so neither layer includes the other.
std::function<torch::nn::AnyModule(int64_t channels)> sync_batchnorm_factory(const DistContext& ctx);

}  // namespace ddptrain
