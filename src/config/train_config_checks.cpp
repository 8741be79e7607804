#include "config/train_config_checks.h"

#include "util/error.h"

namespace ddptrain {

namespace {

void positive(const char* flag, long long v, const char* fix) {
  DDP_USAGE_CHECK(v > 0, "--", flag, "=", v, " must be > 0; ", fix);
}

void non_negative(const char* flag, long long v, const char* fix) {
  DDP_USAGE_CHECK(v >= 0, "--", flag, "=", v, " must be >= 0; ", fix);
}

void validate_program(const TrainerOptions& trainer, const DistOptions& dist, const ProgramOptions& program) {
  // The library takes 0 epochs (the model as given); a training run of none is a mistake.
  positive("epochs", trainer.loop.epochs, "pass e.g. --epochs 10 (ddptrain eval evaluates without training)");
  DDP_USAGE_CHECK(dist.backend == "auto" || dist.backend == "gloo" || dist.backend == "nccl", "--backend='",
                  dist.backend, "' is not a known backend; use auto, gloo or nccl");
  positive("dist_timeout_s", dist.dist_timeout_s, "pass e.g. --dist_timeout_s 600");
  DDP_USAGE_CHECK(dist.rendezvous_timeout_s >= 0, "--rendezvous_timeout_s=", dist.rendezvous_timeout_s,
                  " is negative: pass the seconds the ranks may take to join, or 0 for --dist_timeout_s");
  DDP_USAGE_CHECK(dist.flight_recorder >= 0 && dist.flight_recorder <= 1000000,
                  "--flight_recorder=", dist.flight_recorder,
                  " must be in [0, 1000000] (collectives remembered; 0: off)");
  non_negative("threads", program.threads, "pass 0 to pick cores / local ranks");
  DDP_USAGE_CHECK(program.threads <= 4096, "--threads=", program.threads,
                  " must be at most 4096 (intra-op threads per rank); pass 0 to pick cores / local ranks");
  DDP_USAGE_CHECK(program.cpu_heap_keep_mb >= -1 && program.cpu_heap_keep_mb <= 2047,
                  "--cpu_heap_keep_mb=", program.cpu_heap_keep_mb,
                  " must be in -1..2047 (malloc's trim threshold is an int); pass 0 to keep ",
                  "glibc's policy, -1 for the default");
}

// Flags the chosen model or optimizer has no use for: an error rather than silently ignored
// (checked where they differ from their defaults).
void reject_flags_that_do_not_apply(const TrainConfig& c) {
  const OptimizerOptions optimizer_defaults;
  // A named checkpoint holds the weights: an initial weights file would never be read (with
  // auto it starts a run that has no checkpoint yet, as a restart's first attempt). A Hugging
  // Face folder still gives the model's sizes (its weights are not read: the log says so).
  const CheckpointOptions& ck = c.trainer.checkpoint;
  DDP_USAGE_CHECK(ck.resume_from.empty() || ck.resume_from == "auto" || ck.init_from.empty() ||
                      !c.model.init_from_hf.empty(),
                  "--resume_from='", ck.resume_from, "' names a checkpoint, whose weights the run resumes: ",
                  "--init_from would not be read; drop it (with --resume_from auto, initial weights start ",
                  "a run that has no checkpoint yet)");
  if (c.model.model == ModelKind::kTorchscript)
    DDP_USAGE_CHECK(
        !c.dist.sync_bn,
        "--sync_bn cannot replace a scripted module's BatchNorm (its code is the "
        "module's); drop --sync_bn, or use SyncBatchNorm-free normalisation (GroupNorm) in the model");
  DDP_USAGE_CHECK(
      c.program.loss != LossKind::kMse || c.data.dataset == DatasetKind::kTensors,
      "--loss mse needs float "
      "targets, which only --dataset tensors holds (torch.save({\"images\": x, \"labels\": y.float()}, "
      "path)); --dataset ",
      word(c.data.dataset), " has class labels: use --loss cross_entropy");
  if (is_decoder_model(c.model.model))
    DDP_USAGE_CHECK(!c.dist.sync_bn, "--sync_bn applies to models with BatchNorm; --model ",
                    word(c.model.model), " has none (its norms need no synchronization): drop --sync_bn");
  DDP_USAGE_CHECK(
      c.optimizer.optimizer != OptimizerKind::kAdamw || c.optimizer.momentum == optimizer_defaults.momentum,
      "--momentum=", c.optimizer.momentum,
      " applies to --optimizer sgd; AdamW's are --adam_beta1/--adam_beta2");
  // The loss scaler's settings where no scaler can run (with amp_dtype auto and grad_scaler
  // auto it depends on the device: the Trainer says so in the log).
  const PrecisionOptions precision_defaults;
  const PrecisionOptions& p = c.trainer.precision;
  const bool no_scaler =
      p.grad_scaler == ScalerMode::kOff ||
      (p.grad_scaler == ScalerMode::kAuto && (!p.use_amp || p.amp_dtype == AmpDtype::kBf16));
  DDP_USAGE_CHECK(
      !no_scaler || (p.scaler_init_scale == precision_defaults.scaler_init_scale &&
                     p.scaler_growth_interval == precision_defaults.scaler_growth_interval),
      "--scaler_init_scale and --scaler_growth_interval set the loss scaler, and this run has none (",
      p.grad_scaler == ScalerMode::kOff ? "--grad_scaler off"
      : !p.use_amp                      ? "no autocast: --no-use_amp"
                                        : "bf16 autocast needs none",
      "): drop them, or pass --grad_scaler on");
  DDP_USAGE_CHECK(
      c.program.fused_loss != FusedLoss::kOn || c.program.loss != LossKind::kMse,
      "--fused_loss on fuses cross-entropy into the logits' pass; --loss mse has none: drop --fused_loss");
  DDP_USAGE_CHECK(c.program.fused_loss != FusedLoss::kOn || c.model.model != ModelKind::kMiniResnet,
                  "--fused_loss on applies to token models' (B, T, V) logits (gpt, llama, a scripted one); "
                  "--model mini_resnet classifies images: drop --fused_loss");
  DDP_USAGE_CHECK(p.use_amp || p.amp_dtype == precision_defaults.amp_dtype, "--amp_dtype ", word(p.amp_dtype),
                  " is autocast's dtype, and --no-use_amp runs without autocast (fp32): drop one of them");
  const TrainerOptions trainer_defaults;
  DDP_USAGE_CHECK(
      c.trainer.data.num_workers > 0 ||
          c.trainer.data.prefetch_factor == trainer_defaults.data.prefetch_factor,
      "--prefetch_factor is what each loader thread prepares ahead, and --num_workers 0 has none ",
      "(batches are built in the training thread): drop --prefetch_factor, or give --num_workers");
  const ReportOptions& report = c.trainer.report;
  DDP_USAGE_CHECK(
      report.enable_profiling || (report.profile_first_step == trainer_defaults.report.profile_first_step &&
                                  report.profile_steps == trainer_defaults.report.profile_steps),
      "--profile_first_step and --profile_steps say which steps --enable_profiling traces, and ",
      "this run traces none: pass --enable_profiling, or drop them");
  DDP_USAGE_CHECK(
      !ck.dir.empty() || (ck.save_every == trainer_defaults.checkpoint.save_every &&
                          ck.save_every_steps == trainer_defaults.checkpoint.save_every_steps &&
                          ck.keep == trainer_defaults.checkpoint.keep),
      "--save_every, --save_every_steps and --keep_checkpoints say when to save and what to keep, and ",
      "--checkpoint_dir '' saves nothing: drop them, or give a --checkpoint_dir");
}

// The Trainer's options as the Trainer will check them: lr_schedule auto is resolved for this
// config's optimizer for the check (as the Trainer resolves it) and given back as the user
// wrote it (config.json and the run identity keep it). A bad field is named by its flag
// (Note [Options named by their field]).
void validate_trainer(TrainConfig& c, const std::vector<Flag>& table) {
  const LrSchedule schedule = c.trainer.optim.lr_schedule;
  c.trainer.optim.lr_schedule = effective_lr_schedule(c);
  try {
    c.trainer.validate();
  } catch (const OptionError& e) {
    c.trainer.optim.lr_schedule = schedule;
    throw UsageError(in_flag_words(e, table));
  }
  c.trainer.optim.lr_schedule = schedule;
}

}  // namespace

void validate_train_config(TrainConfig& c, const std::vector<Flag>& table) {
  try {
    c.data.validate();
    c.model.validate(c.data);
    c.optimizer.validate();
  } catch (const OptionError& e) {
    throw UsageError(in_flag_words(e, table));
  }
  validate_trainer(c, table);
  validate_program(c.trainer, c.dist, c.program);
  reject_flags_that_do_not_apply(c);
}

}  // namespace ddptrain
