// LrSchedule: the learning-rate schedules of the Trainer (its words are in config/choices.h).
#pragma once

namespace ddptrain {

/// The learning rate over training, from the optimizer's learning rate when the Trainer is
/// built (the base): constant; cosine per epoch (the reference pipeline's CosineAnnealingLR);
/// or linear warmup then cosine per optimizer step (GPT-2's). auto: step_cosine for AdamW,
/// epoch_cosine for any other optimizer. See train/optimizer.h.
enum class LrSchedule { kAuto, kConstant, kEpochCosine, kStepCosine };

}  // namespace ddptrain
