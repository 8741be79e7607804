#include "train/lr_horizon.h"

#include <cmath>

#include "obs/logger.h"
#include "train/optimizer.h"
#include "train/step_report.h"

namespace ddptrain {
namespace {

const char* schedule_name(LrSchedule k) {
  switch (k) {
    case LrSchedule::kEpochCosine:
      return "epoch_cosine";
    case LrSchedule::kStepCosine:
      return "step_cosine";
    case LrSchedule::kAuto:
      return "auto";
    case LrSchedule::kConstant:
      break;
  }
  return "constant";
}

std::optional<LrSchedule> schedule_named(const std::string& s) {
  for (LrSchedule k : {LrSchedule::kConstant, LrSchedule::kEpochCosine, LrSchedule::kStepCosine})
    if (s == schedule_name(k)) return k;
  return std::nullopt;
}

double horizon_samples(const LrHorizon& h) { return h.steps * static_cast<double>(h.global_batch); }

double warmup_samples(const LrHorizon& h) {
  return static_cast<double>(h.warmup_steps) * static_cast<double>(h.warmup_batch);
}

// "cosine over 3 epochs" / "the minimum at step 12 (768 samples)".
std::string horizon_words(const LrHorizon& h) {
  if (h.kind == LrSchedule::kEpochCosine)
    return str("cosine over ", h.epochs, h.epochs == 1 ? " epoch" : " epochs");
  if (h.kind == LrSchedule::kStepCosine)
    return str(h.warmup_steps > 0 ? str("a warmup of ", with_commas(warmup_samples(h)), " samples, ") : "",
               "the minimum at step ", h.last_step, " (", with_commas(horizon_samples(h)), " samples)");
  return "a constant rate";
}

}  // namespace

LrHorizon LrHorizon::of(const TrainerOptions& o, int64_t last_step, double offset, int64_t global_batch,
                        int64_t warmup_batch) {
  LrHorizon h;
  h.kind = o.optim.lr_schedule;
  h.last_step = last_step;
  if (h.kind == LrSchedule::kStepCosine) {
    h.steps = static_cast<double>(last_step) + offset;
    h.global_batch = global_batch;
    h.warmup_steps = o.optim.warmup_steps;
    h.warmup_batch = warmup_batch > 0 ? warmup_batch : global_batch;
  }
  if (h.kind == LrSchedule::kEpochCosine) h.epochs = o.loop.epochs;
  return h;
}

double LrHorizon::warmup(const TrainerOptions& o) const {
  if (warmup_steps < 0 || warmup_batch <= 0 || global_batch <= 0)
    return static_cast<double>(o.optim.warmup_steps);
  return warmup_samples(*this) / static_cast<double>(global_batch);
}

nlohmann::json LrHorizon::to_json() const {
  nlohmann::json j = {{"kind", schedule_name(kind)}, {"last_step", last_step}};
  if (kind == LrSchedule::kStepCosine) {
    j["steps"] = steps;
    j["global_batch"] = global_batch;
    j["warmup_steps"] = warmup_steps;
    j["warmup_batch"] = warmup_batch;
  }
  if (kind == LrSchedule::kEpochCosine) j["epochs"] = epochs;
  return j;
}

std::optional<LrHorizon> LrHorizon::from_json(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string()) return std::nullopt;
  const auto kind = schedule_named(j["kind"].get<std::string>());
  if (!kind) return std::nullopt;
  LrHorizon h;
  h.kind = *kind;
  h.last_step = j.value("last_step", int64_t{0});
  h.steps = j.value("steps", 0.0);
  h.global_batch = j.value("global_batch", int64_t{0});
  h.warmup_steps = j.value("warmup_steps", int64_t{-1});  // checkpoints before it was recorded: -1
  h.warmup_batch = j.value("warmup_batch", int64_t{0});
  h.epochs = j.value("epochs", 0);
  return h;
}

double scheduled_lr(const LrHorizon& h, const TrainerOptions& o, double base_lr, double position) {
  if (h.kind == LrSchedule::kEpochCosine) return cosine_lr(base_lr, static_cast<int>(position) - 1, h.epochs);
  if (h.kind == LrSchedule::kStepCosine)
    return warmup_cosine_lr(base_lr, position, h.warmup(o), h.steps, o.optim.min_lr_ratio);
  return base_lr;
}

void warn_of_a_warmup_past_the_end(const Logger& log, const LrHorizon& h, const TrainerOptions& o) {
  if (h.kind != LrSchedule::kStepCosine || o.optim.min_lr_ratio >= 1.0) return;
  const double warmup = h.warmup(o), last = h.steps - 1.0;  // the last step's schedule position
  if (warmup <= 0 || warmup < last) return;
  log.warn(str("the warmup (warmup_steps ", o.optim.warmup_steps, ": ", warmup,
               " steps of this run's global batch) reaches the run's last step, ", h.last_step,
               ": the learning rate never comes down to lr x min_lr_ratio; give --warmup_steps fewer "
               "steps than the run has (--max_steps, --epochs)"));
}

std::optional<LrHorizonChange> horizon_change(const LrHorizon& before, const LrHorizon& now, double lr_before,
                                              double lr_after) {
  bool moved = before.kind != now.kind;
  if (!moved && now.kind == LrSchedule::kEpochCosine) moved = before.epochs != now.epochs;
  if (!moved && now.kind == LrSchedule::kStepCosine) {
    const double a = horizon_samples(before), b = horizon_samples(now);
    moved = std::fabs(a - b) > 1e-9 * std::max(std::fabs(a), std::fabs(b));
    if (before.warmup_steps >= 0 && warmup_samples(before) != warmup_samples(now)) moved = true;
  }
  if (!moved) return std::nullopt;
  return LrHorizonChange{before, lr_before, lr_after};
}

std::string LrHorizonChange::describe(const LrHorizon& now) const {
  return str("the learning-rate schedule's end moved: the checkpoint's run had ", horizon_words(before),
             ", this run has ", horizon_words(now), "; the next ",
             now.kind == LrSchedule::kEpochCosine ? "epoch's" : "step's", " learning rate is ",
             fmt("%.4e", lr_after), " (it was to be ", fmt("%.4e", lr_before), ")");
}

nlohmann::json LrHorizonChange::to_json() const {
  return {{"from", before.to_json()}, {"lr_before", lr_before}, {"lr_after", lr_after}};
}

}  // namespace ddptrain
