#include "train/trainer_options.h"
#include "checkpoint/hf_files.h"

#include <filesystem>

#include "util/error.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

void validate_loop_options(const LoopOptions& o) {
  check_option_non_negative(o.epochs, "loop.epochs", "pass e.g. {0:10}");
  check_option_non_negative(o.max_steps, "loop.max_steps", "pass {0:0} for no limit");
  check_option_positive(o.grad_accum_steps, "loop.grad_accum_steps", "pass {0:1} for no accumulation");
  check_option_non_negative(o.eval_every, "loop.eval_every", "pass {0:0} to never evaluate");
}

void validate_optim_options(const OptimOptions& o) {
  check_option_non_negative(o.warmup_steps, "optim.warmup_steps", "pass {0:0} for no warmup");
  if (o.warmup_steps != 0 && o.lr_schedule != LrSchedule::kStepCosine && o.lr_schedule != LrSchedule::kAuto)
    throw OptionError({{&o.warmup_steps, "optim.warmup_steps"}, {&o.lr_schedule, "optim.lr_schedule"}},
                      str("{0}=", o.warmup_steps, " needs the per-step schedule; pass {1:step_cosine}"));
  if (!(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1))
    throw OptionError({{&o.min_lr_ratio, "optim.min_lr_ratio"}},
                      str("{0}=", o.min_lr_ratio, " must be in [0, 1]; pass e.g. {0:0.1}"));
  if (o.min_lr_ratio != OptimOptions{}.min_lr_ratio && o.lr_schedule != LrSchedule::kStepCosine &&
      o.lr_schedule != LrSchedule::kAuto)
    throw OptionError(
        {{&o.min_lr_ratio, "optim.min_lr_ratio"}, {&o.lr_schedule, "optim.lr_schedule"}},
        str("{0}=", o.min_lr_ratio, " is the per-step schedule's last learning rate over the base; ",
            "{1} is ", word(o.lr_schedule), ": pass {1:step_cosine}, or drop {0}"));
  check_option_non_negative(o.clip_grad_norm, "optim.clip_grad_norm",
                            "pass {0:0} to turn clipping off or e.g. {0:1.0}");
}

// An output folder: missing is fine (it is created), a file is not.
void check_output_folder(const std::string& dir, const char* name) {
  if (!dir.empty() && std::filesystem::exists(dir) && !std::filesystem::is_directory(dir))
    throw OptionError({{&dir, name}},
                      str("{0}='", OptionError::literal(dir),
                          "' is a file, not a folder; pass a folder (it is created when missing)"));
}

// An output file: not a folder, and its folder (created when missing) not a file.
void check_output_path(const std::string& file, const char* name) {
  if (file.empty()) return;
  if (std::filesystem::is_directory(file))
    throw OptionError({{&file, name}},
                      str("{0}='", OptionError::literal(file), "' is a folder; pass a file path (e.g. ",
                          OptionError::literal(file), "/metrics.jsonl)"));
  for (auto p = std::filesystem::path(file).parent_path(); !p.empty() && p != p.root_path();
       p = p.parent_path())
    if (std::filesystem::exists(p) && !std::filesystem::is_directory(p))
      throw OptionError({{&file, name}},
                        str("{0}='", OptionError::literal(file), "': '", OptionError::literal(p.string()),
                            "' is a file, not a folder; pass another path"));
}

void validate_checkpoint_options(const CheckpointOptions& o) {
  check_output_folder(o.dir, "checkpoint.dir");
  check_option_non_negative(o.save_every, "checkpoint.save_every", "pass {0:0} to save only at the end");
  check_option_non_negative(o.save_every_steps, "checkpoint.save_every_steps", "pass {0:0} to turn it off");
  check_option_non_negative(o.keep, "checkpoint.keep", "pass {0:0} to keep every checkpoint");
  if (!o.resume_from.empty() && o.resume_from != "auto" && !std::filesystem::is_directory(o.resume_from))
    throw OptionError({{&o.resume_from, "checkpoint.resume_from"}},
                      str("{0}='", OptionError::literal(o.resume_from),
                          "' is not a checkpoint directory; pass a directory written by ddptrain (e.g. "
                          "./checkpoints/epoch_0001), or auto for this run's newest"));
  if (o.resume_from == "auto" && o.dir.empty())
    throw OptionError({{&o.resume_from, "checkpoint.resume_from"}, {&o.dir, "checkpoint.dir"}},
                      "{0:auto} resumes from {1}, which is empty (no checkpoints): set {1}, or drop {0}");
  if (!o.resume_fallback.empty() && o.resume_from != "auto")
    throw OptionError(
        {{&o.resume_fallback, "checkpoint.resume_fallback"}, {&o.resume_from, "checkpoint.resume_from"}},
        str("{0}='", OptionError::literal(o.resume_fallback), "' is read only with {1:auto} (", "{1} is '",
            OptionError::literal(o.resume_from), "'): pass {1:auto}, or drop {0}"));
  // One that is gone is the resume's to judge: rotation deletes the checkpoint a restarted run
  // first resumed once it has saved later ones (checkpoint/resume.cpp).
  std::error_code ec;
  if (!o.resume_fallback.empty() && std::filesystem::exists(o.resume_fallback, ec) &&
      !std::filesystem::is_directory(o.resume_fallback, ec))
    throw OptionError({{&o.resume_fallback, "checkpoint.resume_fallback"}},
                      str("{0}='", OptionError::literal(o.resume_fallback),
                          "' is not a checkpoint directory; pass a directory written by ddptrain"));
  if (!o.init_from.empty() && !std::filesystem::is_regular_file(o.init_from) && !is_hf_folder(o.init_from))
    throw OptionError(
        {{&o.init_from, "checkpoint.init_from"}},
        str("{0}='", OptionError::literal(o.init_from),
            "' is not a file; pass a state_dict saved by torch.save(model.state_dict(), path), a "
            ".safetensors file, or a Hugging Face folder of GPT-2 or the Llama family (config.json and "
            "model.safetensors)"));
}

void validate_report_options(const ReportOptions& o, const CheckpointOptions& checkpoint) {
  check_option_positive(o.log_interval, "report.log_interval", "pass e.g. {0:10}");
  check_output_path(o.metrics_file, "report.metrics_file");
  check_output_folder(o.tensorboard_dir, "report.tensorboard_dir");
  check_output_folder(o.trace_samples_dir, "report.trace_samples_dir");
  check_option_non_negative(o.peak_tflops, "report.peak_tflops", "pass {0:0} to measure it");
  if (o.enable_profiling && o.profile_first_step < 2)  // the kernel trace starts as the step before it ends
    throw OptionError(
        {{&o.profile_first_step, "report.profile_first_step"}},
        str("{0}=", o.profile_first_step,
            ": the first profiled step must be 2 or later (the profiler starts as the step before "
            "it ends); pass e.g. {0:3}"));
  if (o.enable_profiling) check_option_positive(o.profile_steps, "report.profile_steps", "pass e.g. {0:3}");
  if (o.enable_profiling && checkpoint.dir.empty())
    throw OptionError({{&o.enable_profiling, "report.enable_profiling"}, {&checkpoint.dir, "checkpoint.dir"}},
                      "{0} writes its trace to {1}: set {1}");
}

}  // namespace

void TrainerOptions::validate() const {
  try {
    validate_loop_options(loop);
    data.validate();
    validate_optim_options(optim);
    precision.validate();
    ddp.validate();
    zero.validate(ddp);
    // Note [ZeRO stage 2]: a rank keeps its shard of one reduce-scatter, which the next
    // replaces: a step's micro-batches must reach it as one sum (no_sync accumulation).
    if (zero.stage >= 2 && !ddp.accum_no_sync && loop.grad_accum_steps > 1)
      throw OptionError({{&zero.stage, "zero.stage"},
                         {&ddp.accum_no_sync, "ddp.accum_no_sync"},
                         {&loop.grad_accum_steps, "loop.grad_accum_steps"}},
                        str("{0} ", zero.stage,
                            " keeps each rank's shard of one reduction per step, and "
                            "{1} off reduces every one of {2}=",
                            loop.grad_accum_steps,
                            " micro-batches (all but the last would be lost): leave {1} on (the "
                            "micro-batches accumulate locally, one reduction per step), or use {0:1}"));
    validate_checkpoint_options(checkpoint);
    validate_report_options(report, checkpoint);
  } catch (const OptionError& e) {
    throw e.within(this);
  }
}

LrSchedule resolved_schedule(LrSchedule s, bool adamw) {
  if (s != LrSchedule::kAuto) return s;
  return adamw ? LrSchedule::kStepCosine : LrSchedule::kEpochCosine;
}

}  // namespace ddptrain
