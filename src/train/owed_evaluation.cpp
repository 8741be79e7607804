#include "train/owed_evaluation.h"

#include <filesystem>
#include <limits>

#include "util/json_text.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

const char* const kEvaluationMadeFile = "evaluation.json";

// JSON has no NaN (nlohmann writes null): a diverged epoch's loss reads back as NaN.
double number_or_nan(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

}  // namespace

nlohmann::json owed_evaluation_json(int epoch, const EpochEvent& e) {
  const EpochPosition& p = e.position;
  return {{"epoch", epoch},
          {"first_micro", p.first_micro},
          {"batches", p.batches},
          {"steps_per_epoch", p.steps_per_epoch},
          {"micro_done", e.micro_done},
          {"partial", e.partial},
          {"seconds", e.seconds},
          {"train_loss", e.train_loss},
          {"train_acc", e.train_acc},
          {"peak_mem_mib", e.peak_mem_mib},
          {"peak_rss_mib", e.peak_rss_mib},
          {"skipped_samples", e.skipped_samples},
          {"skipped_steps", e.skipped_steps},
          {"positions_done_before", e.positions_done_before},
          {"positions_in_epoch", e.positions_in_epoch}};
}

EpochEvent OwedEvaluation::event() const {
  EpochEvent e(position);
  const nlohmann::json& j = summary;
  e.micro_done = j.at("micro_done").get<int64_t>();
  e.partial = j.at("partial").get<bool>();
  e.seconds = number_or_nan(j, "seconds");
  e.train_loss = number_or_nan(j, "train_loss");
  e.train_acc = number_or_nan(j, "train_acc");
  e.peak_mem_mib = j.at("peak_mem_mib").get<std::vector<double>>();
  e.peak_rss_mib = j.at("peak_rss_mib").get<std::vector<double>>();
  e.skipped_samples = j.at("skipped_samples").get<int64_t>();
  e.skipped_steps = j.at("skipped_steps").get<int64_t>();
  e.positions_done_before = j.at("positions_done_before").get<int64_t>();
  e.positions_in_epoch = j.at("positions_in_epoch").get<int64_t>();
  e.evaluation_resumed = true;
  return e;
}

std::optional<OwedEvaluation> owed_evaluation(const DistContext& ctx, const CheckpointMeta& meta,
                                              const std::string& dir) {
  if (!meta.extra.contains(kEvaluationOwedKey)) return std::nullopt;  // the same on every rank
  std::vector<at::Tensor> made{at::zeros({1}, at::kLong)};
  if (ctx.is_main() && std::filesystem::exists(std::filesystem::path(dir) / kEvaluationMadeFile))
    made[0].fill_(1);
  ctx.broadcast(made, 0, "whether the resumed checkpoint's evaluation was made (Note [Evaluation owed])");
  if (made[0].item<int64_t>() != 0) return std::nullopt;
  const nlohmann::json& j = meta.extra.at(kEvaluationOwedKey);
  try {
    OwedEvaluation owed;
    owed.epoch = j.at("epoch").get<int>();
    owed.position.first_micro = j.at("first_micro").get<int64_t>();
    owed.position.batches = j.at("batches").get<int64_t>();
    owed.position.steps_per_epoch = j.at("steps_per_epoch").get<int64_t>();
    owed.summary = j;
    (void)owed.event();  // every field reads
    return owed;
  } catch (const nlohmann::json::exception& err) {
    throw std::runtime_error(str("checkpoint '", dir, "': meta.json's ", kEvaluationOwedKey,
                                 " does not read (", err.what(),
                                 "); it was not written by this version of ddptrain"));
  }
}

void record_evaluation_made(const DistContext& ctx, const std::string& dir, int epoch, const EvalResult& ev) {
  if (!ctx.is_main()) return;
  const nlohmann::json made = {
      {"epoch", epoch}, {"loss", ev.loss}, {"accuracy", ev.accuracy}, {"samples", ev.samples}};
  try {
    write_file_atomic((std::filesystem::path(dir) / kEvaluationMadeFile).string(), json_text(made, 2) + "\n");
  } catch (const std::exception& err) {
    ctx.log().warn(str("could not record in '", dir, "' that epoch ", epoch, "'s evaluation was made (",
                       err.what(), "): a run resumed from it evaluates epoch ", epoch, " again"));
  }
}

}  // namespace ddptrain
