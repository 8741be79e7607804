// Note [ZeRO stage 1]
// --zero_stage 1 shards the optimizer's state over the ranks (#15; PyTorch's
// ZeroRedundancyOptimizer, DeepSpeed's stage 1): each rank keeps the state of 1/W of the
// parameters' elements. DDP's Reducer still all-reduces every gradient bucket, so clipping,
// the loss scaler's inf check and accumulation see the full averaged gradients exactly as at
// stage 0, and every rank skips the same steps. Only the step is split: the user's optimizer
// (the "full" one) keeps its parameter groups and options, which the schedule sets, but never
// steps and holds no state; an inner optimizer of the same kind holds this rank's shard of
// every bucket (ddp/shard_layout.h) as 1-D views into the parameters' memory and steps them
// with the matching slices of the gradients; then one all-gather per bucket gives every rank
// the others' updated shards. SGD and AdamW are elementwise, so a shard's update is the full
// update restricted to it: stage 1 trains as stage 0.
// Checkpoints hold the state as one file per rank's shard, never gathered whole (Note
// [Optimizer shard files]); a rank loading one assembles the state of the parameters its shard
// touches and keeps its slices, from shard files of any world size or from a stage-0 archive
// (the full state, loaded into the full optimizer first). So a checkpoint of any stage resumes
// at any stage.
//
// Note [ZeRO stage 2]
// --zero_stage 2 shards the averaged gradients too: each bucket is padded to equal shards and
// reduce-scattered instead of all-reduced (Gloo of LibTorch 1.13 has no reduce_scatter: there
// the bucket is all-reduced and the rank keeps its shard), a parameter's full gradient is
// released as soon as it is copied into its bucket, and the full bucket as soon as its shard
// is out: between steps a rank holds 1/W of the gradients. The optimizer's views take their
// gradients from the shards (use_shard_gradients). What needed the whole gradient works on the
// shards: the loss scaler unscales them and the inf/NaN flag is summed over the ranks
// (GradScaler::agree), and clipping takes the global norm from the shards' sums of squares.
// Buckets hold their parameters in memory order (Reducer::slot), the order shards cut.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "ddp/shard_layout.h"
#include "dist/dist_context.h"

namespace ddptrain {

/// Elements [param_offset, param_offset + length) of the parameter `key` (its index over the
/// optimizer's parameter groups; elements in its memory order) at [offset, offset + length) of a
/// rank's state rows.
struct ShardFilePiece {
  int64_t key = 0, param_offset = 0, offset = 0, length = 0;
};

/// This rank's optimizer state and where every rank's lies: what a checkpoint writes as shard
/// files (checkpoint/optimizer_shards.h, Note [Optimizer shard files]).
struct StateShards {
  at::Tensor mine;                                   // [fields, numel]: every bucket's shard, end to end
  std::vector<std::vector<ShardFilePiece>> by_rank;  // every rank's pieces (the same on every rank)
  // Adam's step count per parameter key (-1: the parameter has no state yet). Each parameter
  // keeps its own: under find_unused_parameters one that some steps left out has stepped fewer
  // times, and its bias correction must resume where it was.
  std::vector<int64_t> steps;
};

class ShardedOptimizer {
 public:
  /// full: the user's optimizer over (some of) params, with no state yet (SGD, Adam or AdamW;
  /// UsageError otherwise). params and buckets: DDP's, after any layout change of the
  /// parameters (the views follow their memory).
  /// shard_values (zero_stage 3, Note [ZeRO stage 3]): this rank's persistent shard of bucket
  /// b's parameters, which the views take instead of the parameters' memory; the step then
  /// gathers nothing (the next forward does).
  ShardedOptimizer(torch::optim::Optimizer& full, std::vector<at::Tensor> params,
                   const std::vector<std::vector<size_t>>& buckets, const DistContext& ctx,
                   std::function<at::Tensor(size_t bucket)> shard_values = {});
  ~ShardedOptimizer();
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  /// This rank's shard steps with its gradients (attach_gradients), under full's current
  /// options; then every rank's updated shard reaches every rank. A collective.
  void step();
  /// Stage 2: the gradients are the shards this function returns per bucket (Note [ZeRO stage 2]);
  /// `unused(i)`: parameter i has none this step (no rank used it: find_unused_parameters), so
  /// its pieces get no gradient and the optimizer skips them, as a None gradient at stage 0.
  void use_shard_gradients(std::function<at::Tensor(size_t bucket)> shard_of,
                           std::function<bool(size_t param)> unused = {}) {
    shard_of_ = std::move(shard_of);
    unused_ = std::move(unused);
  }
  bool shards_gradients() const { return static_cast<bool>(shard_of_); }
  /// The shard's views get their gradients: slices of params' grad(), or of the shards.
  void attach_gradients();
  /// The gradients attached (the same tensors the step reads: unscaling or clipping them in
  /// place changes what is stepped).
  std::vector<at::Tensor> attached_gradients() const;
  /// Stage 2: scales the shards so the global norm of the whole gradient is at most max_norm;
  /// returns that norm (before clipping). A collective.
  at::Tensor clip_grad_norm(double max_norm);
  /// fn(key, state) for each of the full optimizer's parameters that has state (key: its index
  /// over the parameter groups; state: its tensors, laid out like it), gathered bucket by
  /// bucket, so that a rank holds one bucket's state at a time, never the whole. A collective.
  void visit_full_state(const std::function<void(size_t key, const std::vector<at::Tensor>& state)>& fn);
  /// Drops whatever state the full optimizer holds (it steps nothing).
  void release_full_state();
  /// After the full optimizer's state was loaded: this rank keeps its slices of it, and the
  /// full state is dropped.
  void scatter_full_state();
  /// This rank's state as rows, and every rank's pieces; nullopt before the first step (the
  /// same on every rank). A collective.
  std::optional<StateShards> state_shards() const;
  /// The parameters (TensorImpl pointers) whose state this rank keeps a slice of.
  std::set<const void*> owned_parameters() const;
  /// After full's state was loaded (for owned_parameters(), or whole): this rank keeps its
  /// slices and the full state is dropped. loaded: a checkpoint held state (so the optimizer
  /// has stepped, even where this rank owns nothing).
  void adopt_loaded_state(bool loaded);
  /// Says (rank 0, in the log) how many of the parameters a checkpoint holds state of (TensorImpl
  /// pointers) the shards do not keep: those outside DDP's list, frozen in this run. Stage 0
  /// keeps their state in its archive; the shards drop it, and unfreezing them later starts it
  /// afresh.
  void say_dropped_state(const std::set<const void*>& with_state) const;
  torch::optim::Optimizer& full() const { return full_; }
  const DistContext& context() const { return ctx_; }
  /// Bytes of optimizer state this rank holds.
  int64_t state_bytes() const;

 private:
  struct Own {  // a piece of this rank's shard, and its view into the parameter
    size_t bucket;
    ShardPiece piece;
    at::Tensor view;
  };
  // One all-gather per bucket of every rank's shard (mine: this rank's, per bucket); put()
  // receives each piece's values (this rank's own too when include_mine).
  void all_gather_pieces(const std::vector<at::Tensor>& mine, bool include_mine, const char* what,
                         const std::function<void(const ShardPiece&, const at::Tensor&)>& put);
  // The same for bucket b alone (mine: this rank's shard of it).
  void all_gather_bucket(size_t b, const at::Tensor& mine, bool include_mine, const char* what,
                         const std::function<void(const ShardPiece&, const at::Tensor&)>& put);
  // This rank's shard of every bucket of state field k (zeros where it has none).
  std::vector<at::Tensor> my_state_shards(int k) const;
  // One zero tensor per bucket, a shard long, of the parameters' dtype and device.
  std::vector<at::Tensor> zero_shards() const;
  // Each parameter's Adam step count by key (key_of: a parameter's TensorImpl -> its key; -1: no
  // state), the same on every rank (a rank learns those of the parameters it owns no piece of).
  // A collective.
  std::vector<int64_t> agreed_steps(const std::unordered_map<const void*, int64_t>& key_of) const;

  torch::optim::Optimizer& full_;
  std::vector<at::Tensor> params_;
  const DistContext& ctx_;
  std::vector<BucketShards> layout_;
  std::function<bool(size_t param)> unused_;  // stage 2: see use_shard_gradients
  std::vector<at::TensorOptions>
      bucket_options_;  // each bucket's dtype and device (buckets are of one dtype)
  std::vector<Own> own_;
  std::vector<int> inner_group_;     // full's group -> inner's group (-1: this rank owns none of it)
  std::vector<size_t> group_sizes_;  // full's groups as the shards were made (checked each step)
  std::unique_ptr<torch::optim::Optimizer> inner_;    // null when this rank owns no element
  std::unordered_map<const void*, size_t> index_of_;  // a parameter's TensorImpl -> its index in params_
  bool stepped_ = false;
  std::function<at::Tensor(size_t)> shard_of_;  // stage 2: the gradient shards
  bool values_in_shards_ = false;               // stage 3: the views are of the parameter shards
};

}  // namespace ddptrain
