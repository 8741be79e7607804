// LossKind: the loss `ddptrain train` optimises (--loss; train/objective_check.h says what
// each needs of the data and the model), with its words (Note [Choices are enums],
// util/choices.h). No LibTorch here.
#pragma once

#include "util/choices.h"

namespace ddptrain {

enum class LossKind { kCrossEntropy, kMse };

inline const Choices<LossKind>& loss_choices() {
  static const Choices<LossKind> c{{"cross_entropy", LossKind::kCrossEntropy}, {"mse", LossKind::kMse}};
  return c;
}
inline const char* word(LossKind v) { return loss_choices().word(v); }

// Whether cross-entropy over a language model's (B, T, V) logits runs fused (Note [Fused
// cross-entropy], kernels/fused_cross_entropy.h): auto on CUDA (where the kernels are built),
// on everywhere (CPU: chunked ATen ops), off: the eager cross_entropy (the golden runs').
enum class FusedLoss { kAuto, kOn, kOff };

inline const Choices<FusedLoss>& fused_loss_choices() {
  static const Choices<FusedLoss> c{
      {"auto", FusedLoss::kAuto}, {"on", FusedLoss::kOn}, {"off", FusedLoss::kOff}};
  return c;
}
inline const char* word(FusedLoss v) { return fused_loss_choices().word(v); }

}  // namespace ddptrain
