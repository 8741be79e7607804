// The optimizer and its learning-rate schedule.
//  - sgd: SGD with momentum and weight decay (the reference pipeline).
//  - adamw: AdamW (decoupled weight decay) with weight decay on tensors of 2 or more
//    dimensions only (weight matrices, convolution kernels, embeddings), none on biases and
//    normalisation weights, as GPT-2/nanoGPT; two parameter groups in that order (an empty
//    one is left out).
// Schedules: epoch_cosine is the reference's CosineAnnealingLR stepped per epoch, in its closed
// form (Python's recursive step() differs in the last bit of the rate now and then);
// step_cosine rises linearly over the warmup steps to --lr, then follows a half cosine down to
// lr·min_lr_ratio at the last step, computed from the optimizer step and the run's horizon
// (so a resumed run has the same learning rates, and reaches the minimum at its last step
// after any resume: Note [Schedule horizon], train/lr_horizon.h).
#pragma once

#include <memory>
#include <vector>

#include <torch/optim/optimizer.h>

#include "train/optimizer_options.h"

namespace ddptrain {

/// Whether build_optimizer makes a fused optimizer for these parameters (FusedOptimizer's
/// rule); on: a UsageError where LibTorch has no fused kernels (1.13).
bool use_fused_optimizer(FusedOptimizer fused, const std::vector<at::Tensor>& params);

/// AdamW or SGD per `o`, fused (optim/fused_optimizers.h) where use_fused_optimizer says.
std::unique_ptr<torch::optim::Optimizer> build_optimizer(const OptimizerOptions& o,
                                                         const std::vector<at::Tensor>& params);

/// Sets every parameter group's learning rate.
void set_lr(torch::optim::Optimizer& opt, double lr);

/// The reference's per-epoch cosine annealing (eta_min 0) in closed form: the learning rate
/// after `epochs_done` of `total_epochs`.
double cosine_lr(double base_lr, int epochs_done, int total_epochs);

/// step_cosine: the learning rate of optimizer step `step` (0-based) of `total_steps` after a
/// linear warmup of `warmup_steps` (all in steps of the current global batch, fractional after a
/// resume at another one: Note [Schedule horizon]); the minimum at step total_steps - 1 and after.
double warmup_cosine_lr(double base_lr, double step, double warmup_steps, double total_steps,
                        double min_ratio);

/// The optimizer's per-parameter state tensors in parameter order (momentum buffers; AdamW's
/// exp_avg and exp_avg_sq), with an undefined tensor where a parameter has no state yet.
std::vector<at::Tensor> optimizer_state_tensors(torch::optim::Optimizer& opt);

}  // namespace ddptrain
