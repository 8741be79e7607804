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

// "cosine over 3 epochs" / "the minimum at step 12 (768 samples)".
std::string horizon_words(const LrHorizon& h) {
  if (h.kind == LrSchedule::kEpochCosine)
    return str("cosine over ", h.epochs, h.epochs == 1 ? " epoch" : " epochs");
  if (h.kind == LrSchedule::kStepCosine)
    return str("the minimum at step ", h.last_step, " (", with_commas(horizon_samples(h)), " samples)");
  return "a constant rate";
}

}  // namespace

LrHorizon LrHorizon::of(const TrainerOptions& o, int64_t last_step, double offset, int64_t global_batch) {
  LrHorizon h;
  h.kind = o.optim.lr_schedule;
  h.last_step = last_step;
  if (h.kind == LrSchedule::kStepCosine) {
    h.steps = static_cast<double>(last_step) + offset;
    h.global_batch = global_batch;
  }
  if (h.kind == LrSchedule::kEpochCosine) h.epochs = o.loop.epochs;
  return h;
}

nlohmann::json LrHorizon::to_json() const {
  nlohmann::json j = {{"kind", schedule_name(kind)}, {"last_step", last_step}};
  if (kind == LrSchedule::kStepCosine) {
    j["steps"] = steps;
    j["global_batch"] = global_batch;
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
  h.epochs = j.value("epochs", 0);
  return h;
}

double scheduled_lr(const LrHorizon& h, const TrainerOptions& o, double base_lr, double position) {
  if (h.kind == LrSchedule::kEpochCosine) return cosine_lr(base_lr, static_cast<int>(position) - 1, h.epochs);
  if (h.kind == LrSchedule::kStepCosine)
    return warmup_cosine_lr(base_lr, position, o.optim.warmup_steps, h.steps, o.optim.min_lr_ratio);
  return base_lr;
}

std::optional<LrHorizonChange> horizon_change(const LrHorizon& before, const LrHorizon& now, double lr_before,
                                              double lr_after) {
  bool moved = before.kind != now.kind;
  if (!moved && now.kind == LrSchedule::kEpochCosine) moved = before.epochs != now.epochs;
  if (!moved && now.kind == LrSchedule::kStepCosine) {
    const double a = horizon_samples(before), b = horizon_samples(now);
    moved = std::fabs(a - b) > 1e-9 * std::max(std::fabs(a), std::fabs(b));
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
