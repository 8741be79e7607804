// DistributedDataParallel (first version): wraps a model that knows nothing of distribution.
//  - construction: rank 0's parameters and buffers are broadcast, so every rank starts equal;
//  - before each training forward: rank 0's buffers (BatchNorm statistics) are broadcast,
//    as PyTorch's DDP does with broadcast_buffers=True;
//  - after backward: sync_gradients() all-reduces the gradients in flat buckets (see
//    Note [Bucket order]) and leaves the global mean in param.grad().
// Invariant: every rank calls these in the same order; buckets are identical on every rank.
// The overlapped reducer (all-reduce during backward) replaces sync_gradients in issue 3.
#pragma once

#include <memory>
#include <vector>

#include <torch/nn/module.h>

#include "dist/dist_context.h"

namespace ddptrain {

struct DdpOptions {
  size_t bucket_cap_bytes = 25u << 20;
  size_t first_bucket_bytes = 1u << 20;
  bool broadcast_buffers = true;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, const DistContext& ctx,
                          DdpOptions opts = {});

  /// Rank 0's buffers to every rank (call before a training forward).
  void sync_buffers();
  /// Averages gradients across ranks; parameters without a gradient count as zero.
  void sync_gradients();

  size_t num_buckets() const { return buckets_.size(); }
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  const DistContext& ctx_;
  DdpOptions opts_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> buffers_;
  std::vector<std::vector<size_t>> buckets_;
  std::vector<at::Tensor> flat_;  // one flat buffer per bucket, reused every step
};

}  // namespace ddptrain
