// LoopHooks: where a failure test breaks the training loop on purpose. The Trainer calls them
// at fixed points (Trainer::set_loop_hooks); by default they do nothing. Not an extension
// point for users: a Callback observes training, a hook may kill the process. `ddptrain
// train` installs FaultHooks (train/fault_hooks.h), the faults the failure tests ask for in
// the environment.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

#include "dist/dist_context.h"

namespace ddptrain {

class LoopHooks {
 public:
  virtual ~LoopHooks() = default;
  /// Before the first forward of optimizer step `step` (1-based): may issue a collective.
  virtual void before_step(const DistContext& ctx, int64_t step) {}
  /// A micro-batch's loss in step `step`, which the hook may replace.
  virtual void on_loss(const DistContext& ctx, int64_t step, at::Tensor& loss) {}
  /// After optimizer step `step`.
  virtual void after_step(const DistContext& ctx, int64_t step) {}
  /// At the start of epoch `epoch`'s evaluation.
  virtual void in_evaluation(const DistContext& ctx, int epoch) {}
  /// Rank 0, at each stage of the save of the checkpoint after step `step` (SaveOptions).
  virtual void in_save(int64_t step, const char* stage) {}
};

}  // namespace ddptrain
