#include "train/fault_hooks.h"

#include <cmath>
#include <vector>

#include <ATen/ATen.h>

namespace ddptrain {

void FaultHooks::before_step(const DistContext& ctx, int64_t step) {
  if (!plan_.extra_collective(ctx.rank(), step)) return;
  std::vector<at::Tensor> extra{at::zeros({3}, at::TensorOptions().device(ctx.device()))};
  ctx.broadcast(extra, 0, "injected fault: a broadcast only this rank issues");
}

void FaultHooks::on_loss(const DistContext& ctx, int64_t step, at::Tensor& loss) {
  if (plan_.poison_loss(ctx.rank(), step)) loss = loss * std::nan("");
}

}  // namespace ddptrain
