// FaultHooks: the faults of a FaultPlan (util/fault.h: what the failure tests ask for in the
// environment) at the Trainer's test hooks (train/loop_hooks.h). Not part of the public API.
#pragma once

#include "train/loop_hooks.h"
#include "util/fault.h"

namespace ddptrain {

/// The faults of a FaultPlan, at the hooks.
class FaultHooks : public LoopHooks {
 public:
  explicit FaultHooks(FaultPlan plan) : plan_(std::move(plan)) {}
  void before_step(const DistContext& ctx, int64_t step) override;
  void on_loss(const DistContext& ctx, int64_t step, at::Tensor& loss) override;
  void after_step(const DistContext& ctx, int64_t step) override { plan_.after_step(ctx.rank(), step); }
  void in_evaluation(const DistContext& ctx, int epoch) override { plan_.in_evaluation(ctx.rank(), epoch); }
  void in_save(int64_t step, const char* stage) override { plan_.in_save(step, stage); }

 private:
  FaultPlan plan_;
};

}  // namespace ddptrain
