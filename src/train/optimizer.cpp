#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "optim/fused_optimizers.h"
#include "util/error.h"
#include "util/torch_compat.h"

namespace ddptrain {

bool use_fused_optimizer(FusedOptimizer fused, const std::vector<at::Tensor>& params) {
  switch (fused) {
    case FusedOptimizer::kOff:
      return false;
    case FusedOptimizer::kOn:
      if (!compat::kHasFusedOptimizers)
        throw UsageError(
            str("--fused_optimizer on (OptimizerOptions::fused) needs LibTorch 2.4 or later, which "
                "has ATen's fused optimizer kernels; this build has ",
                TORCH_VERSION, ": pass --fused_optimizer auto or off"));
      return true;
    case FusedOptimizer::kAuto:
      return compat::kHasFusedOptimizers && !params.empty() && params.front().is_cuda();
  }
  return false;
}

std::unique_ptr<torch::optim::Optimizer> build_optimizer(const OptimizerOptions& o,
                                                         const std::vector<at::Tensor>& params) {
  const bool fused = use_fused_optimizer(o.fused, params);
  if (o.optimizer == OptimizerKind::kAdamw) {
    std::vector<at::Tensor> decay, no_decay;
    for (const auto& p : params) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    auto opts = torch::optim::AdamWOptions(o.lr).betas({o.adam_beta1, o.adam_beta2});
    std::vector<torch::optim::OptimizerParamGroup> groups;  // the decayed group first, empty ones left out
    if (!decay.empty())
      groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                     torch::optim::AdamWOptions(opts).weight_decay(o.weight_decay)));
    if (!no_decay.empty())
      groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                        torch::optim::AdamWOptions(opts).weight_decay(0.0)));
    if (fused) return std::make_unique<FusedAdamW>(std::move(groups), opts);
    return std::make_unique<torch::optim::AdamW>(std::move(groups), opts);
  }
  const auto sgd = torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay);
  if (fused) return std::make_unique<FusedSGD>(params, sgd);
  return std::make_unique<torch::optim::SGD>(params, sgd);
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) g.options().set_lr(lr);
}

double cosine_lr(double base_lr, int epochs_done, int total_epochs) {
  return base_lr * (1.0 + std::cos(M_PI * epochs_done / total_epochs)) / 2.0;
}

double warmup_cosine_lr(double base_lr, double step, double warmup, double total_steps, double min_ratio) {
  // The rate at the step's last sample: never above base_lr where a resume at another global
  // batch made the warmup fractional (step 3.33 of a 4-step warmup ends past its end).
  if (step < warmup) return base_lr * std::min(1.0, (step + 1) / warmup);
  const double decay_steps = std::max(1.0, total_steps - warmup - 1);
  const double t = std::min(1.0, (step - warmup) / decay_steps);
  const double min_lr = base_lr * min_ratio;
  return min_lr + (base_lr - min_lr) * (1.0 + std::cos(M_PI * t)) / 2.0;
}

std::vector<at::Tensor> optimizer_state_tensors(torch::optim::Optimizer& opt) {
  std::vector<at::Tensor> out;
  auto& state = opt.state();
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) {
      auto it = state.find(compat::optimizer_state_key(p));
      if (it == state.end()) {
        out.emplace_back();
        continue;
      }
      if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
        out.push_back(sgd->momentum_buffer());
      } else if (auto* adam = dynamic_cast<torch::optim::AdamWParamState*>(it->second.get())) {
        out.push_back(adam->exp_avg());
        out.push_back(adam->exp_avg_sq());
      }
    }
  return out;
}

}  // namespace ddptrain
