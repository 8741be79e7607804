// torch::optim's AdamW and SGD with ATen's fused kernels (at::_fused_adamw_, at::_fused_sgd_):
// one kernel per parameter group and device instead of about nine per parameter tensor (AdamW)
// on a GPU, and vectorised loops over each tensor on a CPU.
//
// Note [Fused optimizers]
// FusedAdamW derives from torch::optim::AdamW and FusedSGD from torch::optim::SGD, and they keep
// the same per-parameter state (AdamWParamState: step, exp_avg, exp_avg_sq; SGDParamState:
// momentum_buffer), so checkpoints, ZeRO's sharded state and resumes read and write them as
// they do the loop optimizers', and a run may switch between the two on resume. What differs is
// the arithmetic: ATen's kernels order the same update differently (the bias corrections,
// lerp-like moment updates), so values differ from the loop's in the last bits; the bound over
// 20 steps is in tests/unit/test_fused_optimizers.cpp. The kernels are the ones Python's
// torch.optim.AdamW(fused=True) / SGD(fused=True) run, with the step counts as float tensors
// as Python keeps them.
// The step counts stay int64 in the state (the host knows them without reading the device); each
// step makes one float tensor per distinct count on the parameters' device.
// LibTorch 1.13 has no fused kernels: compat::kHasFusedOptimizers is false there and
// build_optimizer refuses --fused_optimizer on (train/optimizer.h).
#pragma once

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

namespace ddptrain {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  at::Tensor step(LossClosure closure = nullptr) override;
};

class FusedSGD : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
  at::Tensor step(LossClosure closure = nullptr) override;
};

/// Whether `opt` is a FusedAdamW or FusedSGD.
bool is_fused_optimizer(const torch::optim::Optimizer& opt);

/// A FusedAdamW or FusedSGD like `full` (its class, default options) over `groups`; `full`
/// must be one (is_fused_optimizer): how ZeRO's shard optimizer keeps the user's choice.
std::unique_ptr<torch::optim::Optimizer> fused_optimizer_like(
    const torch::optim::Optimizer& full, std::vector<torch::optim::OptimizerParamGroup> groups);

}  // namespace ddptrain
