// OptimizerOptions: the optimizer `ddptrain train` builds (train/optimizer.h); a library user
// builds their own and hands it to the Trainer. No LibTorch here (the CLI's flags bind to it).
#pragma once

#include "util/choices.h"

namespace ddptrain {

// The optimizers `ddptrain train` builds, with their words (Note [Choices are enums],
// util/choices.h).
enum class OptimizerKind { kSgd, kAdamw };

inline const Choices<OptimizerKind>& optimizer_choices() {
  static const Choices<OptimizerKind> c{{"sgd", OptimizerKind::kSgd}, {"adamw", OptimizerKind::kAdamw}};
  return c;
}
inline const char* word(OptimizerKind v) { return optimizer_choices().word(v); }

// Which implementation steps the optimizer (Note [Fused optimizers], optim/fused_optimizers.h).
// auto: fused on CUDA (what pays there: one kernel per group), the loop on CPU (the golden
// runs', and for SGD bitwise Python's default there; Python's CPU AdamW moves its first moment
// with lerp_, LibTorch's with mul_ and add_: the last bit of some elements); on: fused on every
// device (LibTorch >= 2.4);
// off: torch::optim's loop everywhere.
enum class FusedOptimizer { kAuto, kOn, kOff };

inline const Choices<FusedOptimizer>& fused_optimizer_choices() {
  static const Choices<FusedOptimizer> c{
      {"auto", FusedOptimizer::kAuto}, {"on", FusedOptimizer::kOn}, {"off", FusedOptimizer::kOff}};
  return c;
}
inline const char* word(FusedOptimizer v) { return fused_optimizer_choices().word(v); }

struct OptimizerOptions {
  OptimizerKind optimizer = OptimizerKind::kSgd;
  double lr = 0.01;  // the peak learning rate: the schedule's base
  double momentum = 0.9;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double weight_decay = 1e-4;  // adamw: on matrices only (not biases, LayerNorm)
  FusedOptimizer fused = FusedOptimizer::kAuto;

  /// OptionError naming the field (Note [Options named by their field], util/error.h).
  void validate() const;
};

}  // namespace ddptrain
