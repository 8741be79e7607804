// Reducer: averages gradients across ranks while backward is still running (the c10d
// Reducer design). Each parameter's AccumulateGrad node gets a post-hook; when a gradient is
// accumulated the hook copies it into its bucket's flat buffer (divided by the world size:
// Note [The mean before the sum]), and when a bucket is full
// its asynchronous all-reduce is launched (buckets launch strictly in bucket order, see
// Note [Bucket order]). At the end of backward an autograd final callback waits for every
// bucket and leaves the global mean in param.grad().
//
// Note [AccumulateGrad hooks]: a parameter holds its AccumulateGrad node only weakly; the
// reducer keeps owning handles alive, or the node (and our hook) would be recreated and the
// hook would silently never fire. Hooks are removed in the destructor.
// Note [no_sync and accumulation]: with sync disabled the hooks do nothing, so gradients
// simply accumulate locally in param.grad(); the next synced backward copies the accumulated
// total into the buckets (times 1/world). One all-reduce per bucket per optimizer step.
// Note [The mean before the sum]: as PyTorch's reducer (mark_variable_ready_dense), a gradient
// is multiplied by 1/world as it is copied into its bucket (divided by world where it already
// is the bucket's view: gradient_as_bucket_view), and the buckets' sum is the mean. Summing
// first and dividing after rounds otherwise at a world size that is not a power of two (about
// half of the elements at world 3): PyTorch's DDP would not be equalled bitwise. A comm hook's
// buckets are copied as they are: the hook divides (as PyTorch's compress hooks).
// Invariant: a bucket's flat buffer is never read or written while its Work is pending.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include "ddp/comm_hook.h"
#include "dist/dist_context.h"
#include "obs/wait_clock.h"
#include "util/torch_compat.h"

namespace ddptrain {

struct ReducerOptions {
  size_t bucket_cap_bytes = 25u << 20;
  size_t first_bucket_bytes = 1u << 20;
  bool gradient_as_bucket_view = false;  // grads become views into the flat buckets
  /// Params without a gradient in a backward contribute what they accumulated before (zero if
  /// nothing); one that no rank used keeps its gradient (None: the optimizer skips it), as
  /// PyTorch's: one more all-reduce per synchronised backward (a flag per parameter).
  bool find_unused_parameters = false;
  CommHook comm_hook = CommHook::kNone;  // compress buckets to 16 bits for the all-reduce
  bool overlap = true;                   // false: launch every bucket only after backward
  bool shard_gradients = false;          // ZeRO stage 2: keep only this rank's shard (Note [ZeRO stage 2])
  /// shard_gradients: full buckets in flight at once; launching one more first finishes the
  /// oldest, so that a rank never holds the whole gradient (0: no bound).
  size_t shard_buckets_in_flight = 2;
  /// Parameter indices per bucket, in launch order (zero_stage 3: one bucket per unit, Note
  /// [ZeRO stage 3]); empty: buckets by size (ddp/bucket_assignment.h).
  std::vector<std::vector<size_t>> buckets;
};

/// Communication counters since the last take_stats().
struct ReducerStats {
  int64_t allreduces = 0;
  int64_t bytes = 0;  // bytes sent into all-reduce (after compression)
  double wait_s = 0;  // time blocked on all-reduce after backward finished (on a GPU: the
                      // compute stream's stall, Note [Communication wait on a GPU])
  int64_t syncs = 0;  // synchronised backward passes
};

class Reducer {
 public:
  Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, const DistContext& ctx,
          ReducerOptions opts);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// false inside no_sync: hooks leave gradients local.
  void set_sync(bool on) { sync_ = on; }
  bool sync() const { return sync_; }
  ReducerStats take_stats();
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }
  /// Bytes of gradient buffers held now (buckets; under shard_gradients their shards).
  int64_t bucket_bytes() const;
  /// shard_gradients: this rank's shard of bucket b's averaged gradient (ddp/shard_layout.h),
  /// valid from the end of a synchronised backward until the next one.
  /// Undefined before the first backward that synchronises.
  const at::Tensor& shard_gradient(size_t b) const { return shard_[b]; }
  /// shard_gradients with find_unused_parameters: whether no rank used parameter i in the last
  /// synchronised backward (its shard slice is zeros, not a gradient: the optimizer skips it, as
  /// a None gradient is skipped without shards). False otherwise.
  bool unused_by_all(size_t i) const { return i < shard_unused_.size() && shard_unused_[i] != 0; }
  /// Called on the autograd thread when every parameter of bucket b has its gradient in this
  /// backward, synchronised or not (zero_stage 3 frees the unit's parameters then).
  void on_bucket_grads(std::function<void(size_t)> fn) { on_bucket_grads_ = std::move(fn); }

 private:
  void on_grad_ready(size_t param);
  void count_local(size_t param);
  void launch_ready_buckets();
  void launch(size_t bucket);
  void finalize();
  /// The end of a backward under no_sync: every bucket's count starts afresh.
  void reset_local_counts();
  /// find_unused_parameters: per parameter, whether no rank used it (`used`: this rank's), from
  /// one all-reduce of the flags.
  std::vector<char> gradient_unused_by_all(const std::vector<char>& used) const;
  void reset_iteration();
  at::Tensor slot(size_t param) const;
  at::Tensor& ensure_flat(size_t bucket);
  at::Tensor& ensure_shard(size_t bucket);
  void finish_bucket(size_t bucket);
  // Parameter i's gradient into its bucket (Note [The mean before the sum]).
  void into_bucket(size_t i, at::Tensor& grad);
  // Waits for the oldest launched bucket not finished yet and finishes it.
  void finish_next();

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  const DistContext& ctx_;
  ReducerOptions opts_;

  std::vector<std::vector<size_t>> buckets_;
  std::vector<size_t> bucket_of_;    // param -> bucket
  std::vector<int64_t> offset_of_;   // param -> offset in its bucket's flat buffer
  std::vector<at::Tensor> flat_;     // one per bucket
  std::vector<at::Tensor> wire_;     // what is all-reduced: flat_ or its 16-bit copy
  std::vector<int64_t> flat_numel_;  // per bucket (padded to a multiple of the world under shard_gradients)
  std::vector<at::Tensor> shard_;    // shard_gradients: this rank's averaged shard per bucket
  std::vector<char> shard_unused_;   // shard_gradients, find_unused_parameters: unused_by_all

  // See Note [AccumulateGrad hooks].
  std::vector<compat::GradAccumulator> grad_accumulators_;
  std::vector<uintptr_t> hook_keys_;

  // Per-iteration state, touched only by the autograd thread running backward.
  bool sync_ = true;
  bool armed_ = false;  // a final callback is queued for this backward
  std::vector<char> ready_;
  std::vector<size_t> pending_;        // per bucket: params not yet ready
  std::vector<size_t> local_pending_;  // the same under no_sync, for on_bucket_grads_
  bool local_armed_ = false;           // a final callback resets local_pending_ after this backward
  std::function<void(size_t)> on_bucket_grads_;
  size_t next_launch_ = 0;
  size_t next_finish_ = 0;  // buckets [0, next_finish_) are finished this iteration
  std::vector<compat::WorkHandle> works_;
  ReducerStats stats_;
  std::unique_ptr<WaitClock> wait_clock_;
};

}  // namespace ddptrain
