// LrSchedule: the learning-rate schedules of the Trainer, with their words (Note [Choices are
// enums], util/choices.h).
#pragma once

#include "util/choices.h"

namespace ddptrain {

/// The learning rate over training, from the optimizer's learning rate when the Trainer is
/// built (the base): constant; cosine per epoch (the reference pipeline's CosineAnnealingLR);
/// or linear warmup then cosine per optimizer step (GPT-2's). auto: step_cosine for AdamW,
/// epoch_cosine for any other optimizer. See train/optimizer.h.
enum class LrSchedule { kAuto, kConstant, kEpochCosine, kStepCosine };

inline const Choices<LrSchedule>& schedule_choices() {
  static const Choices<LrSchedule> c{{"auto", LrSchedule::kAuto},
                                     {"constant", LrSchedule::kConstant},
                                     {"epoch_cosine", LrSchedule::kEpochCosine},
                                     {"step_cosine", LrSchedule::kStepCosine}};
  return c;
}
inline const char* word(LrSchedule v) { return schedule_choices().word(v); }

}  // namespace ddptrain
