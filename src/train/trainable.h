// What the Trainer trains and what it minimises: any torch::nn::Module with a forward of one
// tensor, and a loss of the module's output and the batch's targets.
//  - trainable(module): a module of the user's (a shared_ptr, or a ModuleHolder such as
//    torch::nn::Sequential); flops_per_sample, when given, turns on MFU. A module with a
//    `Units& units()` (ddptrain's models; a user's that runs its blocks through a Units,
//    Note [Units]) is sharded unit by unit under zero_stage 3.
//  - Objective::classification(): cross-entropy over the last dimension (classes (B, C) or
//    next tokens (B, T, V)) and top-1 accuracy: the default. Any other loss is one function;
//    without a `correct` function no accuracy is reported. Objective::mean_squared_error() is
//    the one for regression (float targets).
// Both loss and correct reduce over the batch's predictions: the loss is a mean, and the
// Trainer weighs it by the number of targets it is over (Objective::count: every target unless
// the loss leaves some out, as padding) when it sums over batches and ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include "train/loss_kind.h"

#include "ddp/units.h"

namespace ddptrain {

struct Trainable {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;
  int64_t flops_per_sample = 0;  // training FLOPs of one sample (forward and backward); 0 = no MFU
  std::string description;       // for the log
  Units* units = nullptr;        // the module's units (Note [Units]); null: one root unit
};

template <typename M, typename = void>
struct has_units : std::false_type {};
template <typename M>
struct has_units<M, std::void_t<decltype(std::declval<M&>().units())>> : std::true_type {};
/// The module's parameters, each tensor once, in registration order. LibTorch's parameters()
/// lists a tensor registered under two names twice (a submodule registered twice, a TorchScript
/// model's tied weights mirrored from two submodules; PyTorch's lists it once), and an
/// optimizer given it twice steps it twice: build the optimizer from this (the Trainer refuses
/// a tensor twice in its groups).
inline std::vector<at::Tensor> unique_parameters(const torch::nn::Module& module) {
  std::vector<at::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const at::Tensor& p : module.parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  return out;
}

/// A module that knows its FLOPs and its description (ddptrain's models/model.h Model: GPT,
/// Llama, MiniResNet, ScriptModel).
template <typename M, typename = void>
struct knows_its_flops : std::false_type {};
template <typename M>
struct knows_its_flops<M, std::void_t<decltype(std::declval<const M&>().train_flops_per_sample()),
                                      decltype(std::declval<const M&>().describe())>> : std::true_type {};

/// A user's module: its forward(x) is what the Trainer calls. A ddptrain Model (a ScriptModel
/// given its FLOPs, GPT, ...) gives its own FLOPs and description where none is given here.
template <typename M>
Trainable trainable(std::shared_ptr<M> module, int64_t flops_per_sample = 0, std::string description = "") {
  Trainable t;
  t.forward = [m = module.get()](const at::Tensor& x) { return m->forward(x); };
  if constexpr (has_units<M>::value) t.units = &module->units();
  if constexpr (knows_its_flops<M>::value) {
    if (flops_per_sample == 0) flops_per_sample = module->train_flops_per_sample();
    if (description.empty()) description = module->describe();
  }
  t.module = std::move(module);
  t.flops_per_sample = flops_per_sample;
  t.description = description.empty() ? t.module->name() : std::move(description);
  return t;
}

template <typename Impl>
Trainable trainable(torch::nn::ModuleHolder<Impl> holder, int64_t flops_per_sample = 0,
                    std::string description = "") {
  return trainable(holder.ptr(), flops_per_sample, std::move(description));
}

struct Objective {
  /// The batch's mean loss (a scalar), of the module's output and the targets.
  std::function<at::Tensor(const at::Tensor& output, const at::Tensor& targets)> loss;
  /// The number of correct predictions (a scalar tensor), or empty: no accuracy.
  std::function<at::Tensor(const at::Tensor& output, const at::Tensor& targets)> correct;
  /// Checks a batch's targets while they are on the host (before the copy to the device: no
  /// device sync); UsageError for targets the loss cannot take. Empty: none checked.
  std::function<void(const at::Tensor& targets)> check_targets;
  /// The number of targets the loss's mean is over and `correct` counts among (a scalar tensor;
  /// no host sync), or empty: every target (targets.numel()). An Objective whose loss leaves
  /// some targets out (padding) gives it: the epoch's and the evaluation's loss and accuracy
  /// weigh each batch by it and divide by its sum (a batch of none adds nothing). The gradient
  /// and the step line's loss weigh each micro-batch and rank alike, as PyTorch's DDP does.
  std::function<at::Tensor(const at::Tensor& output, const at::Tensor& targets)> count;

  /// Cross-entropy of class (B, C) or next-token (B, T, V) logits; `fused` for the latter
  /// (Note [Fused cross-entropy]: its backward overwrites the logits, read them before). Every
  /// target counts: a negative one (PyTorch's ignore_index, -100) is refused by check_targets,
  /// as the eager loss would skip it, the fused one stop on it and the mean count it.
  static Objective classification(FusedLoss fused = FusedLoss::kAuto);
  /// Cross-entropy and top-1 accuracy as classification(), over the targets that are not
  /// ignore_index (PyTorch's cross_entropy(..., ignore_index): padded positions); `count` gives
  /// their number. The eager loss (the fused one counts every target), as a sum over the
  /// counted targets divided by their number: PyTorch's mean within rounding, except that a
  /// batch of none has loss 0 and zero gradients (PyTorch's: NaN, which the step would spread).
  static Objective classification_ignoring(int64_t ignore_index = -100);
  /// The mean squared error of outputs and float targets of the same shape; no accuracy.
  static Objective mean_squared_error();
};

}  // namespace ddptrain
