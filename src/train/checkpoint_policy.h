// CheckpointPolicy: when the Trainer saves, as a callback. Mid-epoch every save_every_steps
// optimizer steps (not at an epoch's end, which saves once below, nor at a stop); at an
// epoch's end every save_every epochs, when save_every_steps falls there, after the last
// epoch, and at a stop (a stop request saves only with checkpoint_on_signal). An epoch's save
// comes before its evaluation (before_evaluation), so an evaluation that fails loses no
// training, and keeps what the evaluation's record needs (Note [Evaluation owed]); on_epoch_end
// saves only what the evaluation made due (a stop request during it).
// Saving is a collective (the RNG-state gather and the closing barrier): every rank decides
// the same.
#pragma once

#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "dist/dist_context.h"
#include "train/callbacks.h"
#include "train/loop_hooks.h"
#include "train/precision.h"
#include "train/trainer_options.h"

namespace ddptrain {

/// meta.json's key for amp_dtype=auto's choice where the run trained in another precision.
extern const char* const kPrecisionAutoKey;
/// What amp_dtype=auto resumes from a checkpoint: that choice where it kept one, else the
/// precision it trained in.
std::string precision_to_resume(const CheckpointMeta& meta);

class CheckpointPolicy : public Callback {
 public:
  /// Saves `parts` (the Trainer's), the position and the loss scale.
  /// `hooks`: the test hooks of each save's stages (train/loop_hooks.h).
  /// `precision`: what the run trains in (meta.json "precision") and, where a device lacked
  /// amp_dtype=auto's choice, that choice ("precision_auto": what a resume takes up again).
  /// `training_split`: meta.json's record of the data trained on (train/training_split.h).
  CheckpointPolicy(const DistContext& ctx, const TrainerOptions& opts, const Precision& precision,
                   const std::vector<CheckpointPart>& parts, LoopHooks& hooks, nlohmann::json training_split);

  void on_step_end(const TrainState& s, const StepEvent& e) override;
  /// The epoch's save when one is due: called by the Trainer after the epoch's summary.
  /// `evaluation_due`: the save keeps the epoch's summary (Note [Evaluation owed]).
  void before_evaluation(const TrainState& s, const EpochEvent& e, bool evaluation_due);
  /// The evaluation due at the epoch's save was made: the checkpoint saved before it, if any,
  /// owes it no longer.
  void evaluation_made(const TrainState& s, const EvalResult& ev);
  void on_epoch_end(const TrainState& s, const EpochEvent& e) override;
  /// The newest checkpoint this run saved, or "".
  const std::string& last_checkpoint() const { return last_; }
  /// Seconds this run spent in step checkpoints (saved at a step's end, not an epoch's).
  double step_save_seconds() const { return step_save_s_; }

 private:
  bool due_by_steps(const TrainState& s) const;
  void save_if_due(const TrainState& s, const EpochEvent& e);
  void save(const TrainState& s, bool epoch_complete);
  void warn_of_the_stop_grace(double save_s);

  const DistContext& ctx_;
  const TrainerOptions& opts_;
  std::string precision_, precision_auto_;
  const std::vector<CheckpointPart>& parts_;
  LoopHooks& hooks_;
  nlohmann::json training_split_;
  std::string last_;
  int64_t saved_step_ = -1;             // the global step of this run's newest save
  std::optional<nlohmann::json> owed_;  // the epoch's summary, while its save owes the evaluation
  bool last_owes_ = false;              // last_ owes its epoch's evaluation
  double step_save_s_ = 0;
  bool said_grace_ = false;  // the stop grace's warning, once
};

}  // namespace ddptrain
