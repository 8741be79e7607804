// Note [Schedule horizon]
// Where a learning-rate schedule ends. step_cosine reaches lr x min_lr_ratio at the run's last
// optimizer step, the global step `last_step`: --max_steps, or the end of the last epoch when
// sooner. Its position is counted in steps of the current global batch (a resume at another
// global batch continues by samples: lr_step_offset, train/resume.h), so its length in those
// steps is last_step + lr_step_offset, and the last step has the minimum whatever resumes came
// before. The warmup is counted by samples too: --warmup_steps steps of the global batch of the
// run that began the schedule (warmup_batch), so a resume at another global batch ends it at the
// same sample (a step's learning rate is the schedule's at the step's last sample); another
// --warmup_steps on resume is a change of the schedule, said as the end's is. The end of the last epoch is
// counted from the resume point (the rest of the epoch at the new world size, then whole epochs), not from
// steps per epoch x --epochs, which a world change makes untrue. epoch_cosine ends with --epochs. A
// checkpoint records its run's horizon; a resume that moves it (another --max_steps or --epochs, or another
// global batch, which changes the samples --max_steps steps cover, or another warmup) says so, with the
// learning rate the next step had and now has, in the log and in the metrics' run record.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "train/trainer_options.h"

namespace ddptrain {

struct LrHorizon {
  LrSchedule kind = LrSchedule::kConstant;
  int64_t last_step = 0;     // the global step the run ends at unless stopped early
  double steps = 0;          // step_cosine: the schedule's length in steps of global_batch
  int64_t global_batch = 0;  // step_cosine
  int64_t warmup_steps = 0;  // step_cosine: --warmup_steps, in steps of warmup_batch; -1: not recorded
  int64_t warmup_batch = 0;  // step_cosine: the global batch of the run that began the schedule
  int epochs = 0;            // epoch_cosine

  /// The horizon of a run whose schedule position is global_step + offset (in steps of
  /// `global_batch`) and that ends at `last_step`; its warmup is counted in steps of
  /// `warmup_batch` (0: of `global_batch`, a run that begins the schedule).
  static LrHorizon of(const TrainerOptions& o, int64_t last_step, double offset, int64_t global_batch,
                      int64_t warmup_batch = 0);

  /// step_cosine: the warmup's length in steps of global_batch (fractional after a resume at
  /// another global batch); a horizon that recorded none takes the options'.
  double warmup(const TrainerOptions& o) const;

  nlohmann::json to_json() const;
  /// A checkpoint's record; nullopt when it has none (older checkpoints) or it does not parse.
  static std::optional<LrHorizon> from_json(const nlohmann::json& j);
};

/// The learning rate of the step at schedule position `position` (step_cosine: global_step +
/// offset; epoch_cosine: the epoch, 1-based) under horizon `h`.
double scheduled_lr(const LrHorizon& h, const TrainerOptions& o, double base_lr, double position);

class Logger;

/// step_cosine: warns where the warmup reaches the run's last step (the learning rate then never
/// comes down to lr x min_lr_ratio: a --max_steps shorter than --warmup_steps, say).
void warn_of_a_warmup_past_the_end(const Logger& log, const LrHorizon& h, const TrainerOptions& o);

/// What a resume changes of the checkpoint's schedule.
struct LrHorizonChange {
  LrHorizon before;
  double lr_before = 0, lr_after = 0;  // of the run's next step (epoch_cosine: its epoch)
  std::string describe(const LrHorizon& now) const;
  nlohmann::json to_json() const;
};

/// The change when `now` ends elsewhere than `before` (step_cosine: in samples; epoch_cosine: in
/// epochs) or the kind differs; nullopt when the schedule continues as it was.
std::optional<LrHorizonChange> horizon_change(const LrHorizon& before, const LrHorizon& now, double lr_before,
                                              double lr_after);

}  // namespace ddptrain
