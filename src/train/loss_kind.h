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

}  // namespace ddptrain
