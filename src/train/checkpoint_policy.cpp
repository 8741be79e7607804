#include "train/checkpoint_policy.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#include "checkpoint/checkpoint.h"
#include "train/fingerprint.h"
#include "train/owed_evaluation.h"
#include "util/clock.h"

namespace ddptrain {

const char* const kPrecisionAutoKey = "precision_auto";

std::string precision_to_resume(const CheckpointMeta& meta) {
  return meta.extra.contains(kPrecisionAutoKey) ? meta.extra[kPrecisionAutoKey].get<std::string>()
                                                : meta.precision;
}

CheckpointPolicy::CheckpointPolicy(const DistContext& ctx, const TrainerOptions& opts,
                                   const Precision& precision, const std::vector<CheckpointPart>& parts,
                                   LoopHooks& hooks, nlohmann::json training_split)
    : ctx_(ctx),
      opts_(opts),
      precision_(precision.name()),
      precision_auto_(precision.auto_choice),
      parts_(parts),
      hooks_(hooks),
      training_split_(std::move(training_split)) {}

bool CheckpointPolicy::due_by_steps(const TrainState& s) const {
  return opts_.checkpoint.save_every_steps > 0 && s.global_step % opts_.checkpoint.save_every_steps == 0;
}

void CheckpointPolicy::on_step_end(const TrainState& s, const StepEvent& e) {
  if (!due_by_steps(s) || s.micro_done >= e.epoch.batches || e.stopping) return;
  const auto start = Clock::now();
  save(s, false);
  step_save_s_ += seconds_since(start);
}

void CheckpointPolicy::before_evaluation(const TrainState& s, const EpochEvent& e, bool evaluation_due) {
  owed_.reset();
  if (evaluation_due) owed_ = owed_evaluation_json(s.epoch, e);
  save_if_due(s, e);
}

void CheckpointPolicy::evaluation_made(const TrainState& s, const EvalResult& ev) {
  if (last_owes_ && saved_step_ == s.global_step) record_evaluation_made(ctx_, last_, s.epoch, ev);
  last_owes_ = false;
}

// A save here (a stop request during the evaluation made it due) owes the evaluation still.
void CheckpointPolicy::on_epoch_end(const TrainState& s, const EpochEvent& e) {
  if (e.eval) owed_.reset();
  save_if_due(s, e);
  owed_.reset();
}

void CheckpointPolicy::save_if_due(const TrainState& s, const EpochEvent& e) {
  if (saved_step_ == s.global_step) return;  // saved before the evaluation (or mid-epoch at this step)
  const bool complete = s.micro_done == e.position.batches;
  const bool last = (e.stopping && (s.stopped_by_signal == 0 || opts_.checkpoint.on_signal)) ||
                    s.epoch == opts_.loop.epochs;
  const bool periodic =
      opts_.checkpoint.save_every > 0 && s.epoch % opts_.checkpoint.save_every == 0 && complete;
  if (periodic || last || due_by_steps(s)) save(s, complete);
}

void CheckpointPolicy::save(const TrainState& s, bool epoch_complete) {
  if (opts_.checkpoint.dir.empty()) return;                // the options asked for none
  ctx_.recorder().set_phase("checkpoint", s.global_step);  // Note [Flight recorder]
  CheckpointMeta meta{s.epoch,
                      s.micro_done,
                      epoch_complete,
                      s.global_step,
                      ctx_.world_size(),
                      static_cast<int64_t>(opts_.loop.seed),
                      {},
                      precision_,
                      opts_.run_identity,
                      opts_.data.batch_size};
  if (s.scaler.enabled()) meta.extra["grad_scaler"] = to_json(s.scaler.state());
  if (!precision_auto_.empty()) meta.extra[kPrecisionAutoKey] = precision_auto_;
  // Note [Resume at another world size]: the epoch's order and the prefix of it trained.
  meta.extra["epoch_plan"] = {
      {"world", s.plan.world},
      {"batch", s.plan.batch},
      {"end", s.plan.end},
      {"done", s.plan.done_after(s.micro_done, ctx_.world_size(), opts_.data.batch_size)},
      {"samples", s.plan.samples}};
  if (s.plan.files != 0) meta.extra["epoch_plan"]["files"] = hex_fingerprint(s.plan.files);
  if (s.lr_step_offset != 0) meta.extra["lr_step_offset"] = s.lr_step_offset;
  meta.extra["lr_horizon"] = s.lr_horizon.to_json();  // Note [Schedule horizon]
  meta.extra["global_batch"] = opts_.global_batch(ctx_.world_size());
  meta.extra["training_split"] = training_split_;      // what eval needs of it (train/training_split.h)
  if (owed_) meta.extra[kEvaluationOwedKey] = *owed_;  // Note [Evaluation owed]
  char name[64];
  if (epoch_complete)
    std::snprintf(name, sizeof(name), "epoch_%04d", s.epoch);
  else
    std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(s.global_step));
  const int64_t step = s.global_step;
  const auto start = Clock::now();
  auto published = start;  // rank 0's: when the checkpoint took its name (what a stop must reach)
  SaveOptions so{opts_.checkpoint.keep, [this, step, &published](const char* stage) {
                   hooks_.in_save(step, stage);
                   if (std::strcmp(stage, "renamed") == 0) published = Clock::now();
                 }};
  saved_step_ = s.global_step;
  last_ = save_checkpoint(ctx_, opts_.checkpoint.dir, name, parts_, meta, opts_.config_json, std::move(so));
  last_owes_ = owed_.has_value();
  ctx_.log().info(str("checkpoint saved: ", last_));
  warn_of_the_stop_grace(std::chrono::duration<double>(published - start).count());
}

// A stop's save must end within the launcher's grace before SIGKILL: said once, where a save took
// more than half of it (a stop cut short keeps the previous checkpoint as the newest).
void CheckpointPolicy::warn_of_the_stop_grace(double save_s) {
  const int grace = ctx_.stop_grace_s();
  if (said_grace_ || grace <= 0 || save_s <= grace / 2.0 || !ctx_.is_main()) return;
  said_grace_ = true;
  ctx_.log().warn(
      str("this checkpoint took ", fmt("%.1f", save_s), " s to save, and the launcher gives a stop ", grace,
          " s to save before SIGKILL (torchrun's default, unless its --shutdown_timeout given on "
          "its command line says more): a stop's save may be cut short (the previous checkpoint "
          "stays the newest). Give it more (ddptrain launch --signal_grace_s; torch 2.15's "
          "torchrun --shutdown_timeout, PET_SHUTDOWN_TIMEOUT or TORCH_ELASTIC_SHUTDOWN_TIMEOUT)"));
}

}  // namespace ddptrain
