// DistributedDataParallel: wraps a model that knows nothing of distribution.
//  - construction: checks that every rank has the same parameters (names, shapes, dtypes),
//    then broadcasts rank 0's parameters and buffers so every rank starts equal;
//  - backward: the Reducer all-reduces gradients in buckets while backward runs and leaves
//    the global mean in param.grad() when backward() returns;
//  - no_sync(): an RAII guard for gradient accumulation (see Note [no_sync and accumulation]);
//  - sync_buffers(): rank 0's buffers (BatchNorm statistics) to every rank, called before
//    the first training forward of each accumulation group when broadcast_buffers is on
//    (PyTorch's default; it skips the sync in a forward after a no_sync backward).
// Invariant: every rank makes the same calls in the same order. World size 1 is a
// pass-through: no hooks, no collectives.
#pragma once

#include <memory>
#include <vector>

#include <torch/nn/module.h>

#include "ddp/ddp_options.h"
#include "ddp/reducer.h"
#include "dist/dist_context.h"

namespace ddptrain {

/// What DistributedDataParallel is built with: the reducer's options in bytes and buckets.
struct DdpSetup {
  ReducerOptions reducer;
  bool broadcast_buffers = true;
  /// Backward runs collectives besides the buckets' (zero_stage 3 gathers units there; DDP finds
  /// SyncBatchNorm itself): with find_unused_parameters every bucket then waits for backward's
  /// end (Note [Unused parameters and collectives in backward]).
  bool backward_has_collectives = false;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, const DistContext& ctx,
                          DdpSetup opts = {});

  /// Inside the guard backward only accumulates local gradients.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    Reducer* reducer_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// Rank 0's buffers to every rank (a no-op unless broadcast_buffers and world > 1).
  void sync_buffers();
  /// Communication counters since the last call.
  ReducerStats take_stats();
  size_t num_buckets() const { return reducer_ ? reducer_->buckets().size() : 0; }
  /// UsageError naming a parameter that was frozen (requires_grad false) when DDP was built
  /// and requires a gradient now: DDP does not reduce it, so each rank would step it with its
  /// own gradient and the replicas would part, silently. The Trainer calls it at each epoch.
  /// Nothing without a process group (one process: nothing is reduced).
  void check_still_frozen() const;
  /// The parameters DDP reduces (those that require grad, in the module's order) and its
  /// buckets of them (indices into that list; none without a process group).
  const std::vector<at::Tensor>& parameters() const { return params_; }
  std::vector<std::vector<size_t>> buckets() const {
    return reducer_ ? reducer_->buckets() : std::vector<std::vector<size_t>>{};
  }
  /// zero_stage 2: this rank's shard of bucket b's averaged gradient (ddp/reducer.h).
  const at::Tensor& shard_gradient(size_t b) const { return reducer_->shard_gradient(b); }
  /// zero_stage 2: whether no rank used parameter i in the last synchronised backward.
  bool unused_by_all(size_t i) const { return reducer_ && reducer_->unused_by_all(i); }
  /// See Reducer::on_bucket_grads (no-op without a process group).
  void on_bucket_grads(std::function<void(size_t)> fn) {
    if (reducer_) reducer_->on_bucket_grads(std::move(fn));
  }
  /// Bytes of the gradient buffers DDP holds now.
  int64_t bucket_bytes() const { return reducer_ ? reducer_->bucket_bytes() : 0; }
  size_t bucket_cap_bytes() const { return opts_.reducer.bucket_cap_bytes; }

 private:
  void verify_replicas(const std::vector<std::string>& names);
  void launch_buckets_after_backward_if_needed();

  std::shared_ptr<torch::nn::Module> module_;
  const DistContext& ctx_;
  DdpSetup opts_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> buffers_;
  // Parameters nothing trains (requires_grad off): compared and broadcast at the start as
  // PyTorch's DDP syncs every parameter and buffer, never reduced.
  std::vector<at::Tensor> frozen_;
  std::vector<std::string> frozen_names_;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace ddptrain
