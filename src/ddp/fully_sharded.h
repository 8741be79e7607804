// Note [ZeRO stage 3]
// --zero_stage 3 shards the parameters too (FSDP's FULL_SHARD, DeepSpeed's stage 3): between
// steps a rank holds 1/W of every parameter, its gradient and its optimizer state. The model is
// cut into units (Note [Units]: each block; every parameter outside the blocks forms the root
// unit). A unit's parameters become views into one flat buffer of the unit (memory order,
// padded to a multiple of W, the layout of ddp/shard_layout.h), whose storage is released
// while the unit is not running and refilled by an all-gather of the ranks' shards when it is:
//  - forward: before a unit runs, its gather is waited for (or issued), and the next unit's
//    gather is issued so it overlaps this unit's compute; after it runs its storage is
//    released and each of its outputs gets a hook;
//  - backward: the first of those hooks to fire (when that output's gradient is complete, just
//    before the unit's backward) gathers the unit again and issues the previous unit's gather;
//    once every parameter of the unit has its gradient (Reducer::on_bucket_grads) it is
//    released. A unit whose backward reads none of its parameters (UnitBackward, ddp/units.h:
//    an embedding) is neither gathered again nor gathered ahead for its backward;
//  - the root unit is gathered around the whole forward and released at the end of backward
//    (an autograd final callback, which also releases anything a skipped unit left).
// The storage is released in place (its bytes set to none), not replaced, so the tensors
// autograd saved in forward (the parameters, views of them) see the gathered values again in
// backward, as FSDP does with its flat parameters' storage. DDP's buckets are the units (one
// bucket per unit, launch order last unit first, the root last): gradients are reduce-scattered
// per unit as at stage 2, and the optimizer steps views into this rank's persistent shard of
// each unit (ShardedOptimizer over shards()), which the next gathers read. What reads the
// parameters between steps (checkpoints, fingerprints, loading) gathers every unit first
// (gather_all) and releases them after (release_all).
#pragma once

#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "ddp/shard_layout.h"
#include "ddp/units.h"
#include "dist/dist_context.h"

namespace ddptrain {

/// DDP's buckets for stage 3: one per unit holding trainable parameters, the last unit's
/// first, then the root unit (the parameters of no unit). UsageError when a parameter is in
/// two units.
std::vector<std::vector<size_t>> unit_buckets(const std::vector<at::Tensor>& params, const Units* units);

/// A UsageError naming the parameter when one of a unit's is registered outside the unit too (a
/// weight tied between a unit and the root): the unit frees it after its forward, and the other
/// place would read freed memory. Such a weight belongs to the root (Note [Units]).
void check_unit_parameters_stay_in_their_units(const torch::nn::Module& model, const Units& units);

/// One bucket's parameters (in the bucket's order) moved into one flat buffer on `device`, laid
/// out as ddp/shard_layout.h cuts it (padded to a multiple of the world size), each parameter
/// becoming a view into it (the same parameter, new memory; its old memory is freed unless
/// something else holds it); this rank's shard is kept and the flat buffer's storage released.
/// broadcast: rank 0's values go to every rank first (a collective). UsageError for
/// parameters of different dtypes or devices, or not dense.
BuiltShard shard_bucket(const std::vector<at::Tensor>& params, c10::Device device, const DistContext& ctx,
                        bool broadcast);

class FullyShardedParams : public UnitHooks {
 public:
  /// params and buckets: DDP's (unit_buckets). Takes over the parameters' memory (each becomes
  /// a view into its unit's flat buffer), keeps this rank's shards and releases the rest; a
  /// unit sharded as built (Units::built_shard) is taken as it is.
  /// `units` (may be null) gets this object as its hooks until destruction.
  FullyShardedParams(std::vector<at::Tensor> params, std::vector<std::vector<size_t>> buckets, Units* units,
                     const DistContext& ctx);
  ~FullyShardedParams() override;
  FullyShardedParams(const FullyShardedParams&) = delete;
  FullyShardedParams& operator=(const FullyShardedParams&) = delete;

  /// The model's forward: the root unit gathered around it (kept for backward when the
  /// output needs gradients, released at once otherwise).
  at::Tensor forward(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x);
  void before_forward(size_t unit) override;
  void after_forward(size_t unit, const std::vector<at::Tensor>& outputs) override;
  /// Reducer::on_bucket_grads: bucket b's parameters are done for this backward.
  void release(size_t bucket);

  /// Every unit gathered (a collective), e.g. to read or write the full parameters.
  void gather_all();
  void release_all();
  /// After the full parameters were written (gathered): this rank's shards take their values.
  void refresh_shards();
  /// This rank's shard of bucket b: the values the optimizer steps (persistent).
  const at::Tensor& shard(size_t bucket) const { return shard_[bucket]; }
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  /// All-gathers of a unit's parameters issued since construction.
  int64_t gathers_issued() const { return gathers_issued_; }
  /// Bytes of parameters this rank holds now (its shards and any gathered unit), and the most
  /// it held since reset_peak() (units gathered ahead for overlap included).
  int64_t held_bytes() const;
  int64_t peak_held_bytes() const { return peak_; }
  void reset_peak() { peak_ = held_bytes(); }

 private:
  void gather(size_t bucket, bool wait);  // issues the all-gather unless gathered or in flight
  void ensure(size_t bucket) { gather(bucket, true); }
  void settle(size_t bucket);  // waits for its all-gather, if one is in flight
  // Issues the gather of the first unit with parameters from `unit` on, stepping by direction.
  // Backward (direction -1) skips the units whose backward reads no parameters.
  void gather_ahead(int unit, int direction);
  void pre_backward(size_t unit);
  bool backward_reads_parameters(size_t unit) const;
  void arm_final_release();
  int bucket_of_unit(size_t unit) const;  // -1: a unit without trainable parameters

  std::vector<at::Tensor> params_;
  std::vector<std::vector<size_t>> buckets_;
  Units* units_;
  const DistContext& ctx_;
  std::vector<BucketShards> layout_;
  std::vector<int> bucket_of_unit_;
  int root_ = -1;                  // the root unit's bucket, or -1
  std::vector<at::Tensor> flat_;   // per bucket: the full values (storage released when not gathered)
  std::vector<at::Tensor> shard_;  // per bucket: this rank's shard (persistent)
  std::vector<char> gathered_;
  std::vector<compat::WorkHandle> in_flight_;
  bool armed_ = false;  // a final callback is queued for this backward
  int64_t peak_ = 0;
  int64_t gathers_issued_ = 0;
};

}  // namespace ddptrain
