#include "train/train_from_config.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/python_pickle.h"
#include "checkpoint/weights_file.h"
#include "config/run_identity.h"
#include "data/augment.h"
#include "data/datasets.h"
#include "ddp/sync_batchnorm.h"
#include "models/build_model.h"
#include "train/objective_check.h"
#include "train/optimizer.h"
#include "train/resume.h"
#include "train/stop_signal.h"

namespace ddptrain {

TrainerOptions trainer_options(const TrainConfig& cfg, const std::string& config_json) {
  TrainerOptions o;
  o.epochs = cfg.optim.epochs;
  o.max_steps = cfg.optim.max_steps;
  o.batch_size = cfg.data.batch_size;
  o.grad_accum_steps = cfg.optim.grad_accum_steps;
  o.accum_no_sync = cfg.dist.accum_no_sync;
  o.num_workers = cfg.data.num_workers;
  o.drop_last = cfg.data.drop_last;
  o.prefetch_factor = cfg.data.prefetch_factor;
  o.seed = static_cast<uint64_t>(cfg.run.seed);
  o.channels_last = uses_channels_last(cfg.model);
  o.lr_schedule = cfg.effective_lr_schedule() == ScheduleChoice::kStepCosine ? LrSchedule::kStepCosine
                                                                             : LrSchedule::kEpochCosine;
  o.warmup_steps = cfg.optim.warmup_steps;
  o.min_lr_ratio = cfg.optim.min_lr_ratio;
  o.clip_grad_norm = cfg.optim.clip_grad_norm;
  o.precision = {cfg.run.use_amp, cfg.optim.amp_dtype, cfg.optim.grad_scaler, ""};
  o.scaler_init_scale = cfg.optim.scaler_init_scale;
  o.scaler_growth_interval = cfg.optim.scaler_growth_interval;
  o.bucket_cap_mb = cfg.dist.bucket_cap_mb;
  o.first_bucket_mb = cfg.dist.first_bucket_mb;
  o.gradient_as_bucket_view = cfg.dist.gradient_as_bucket_view;
  o.find_unused_parameters = cfg.dist.find_unused_parameters;
  o.broadcast_buffers = cfg.dist.broadcast_buffers;
  o.comm_hook = cfg.dist.ddp_comm_hook;
  o.ddp_overlap = cfg.dist.ddp_overlap;
  o.zero_stage = cfg.dist.zero_stage;
  o.checkpoint_dir = cfg.run.checkpoint_dir;
  o.save_every = cfg.run.save_every;
  o.save_every_steps = cfg.run.save_every_steps;
  o.keep_checkpoints = cfg.run.keep_checkpoints;
  o.resume_from = cfg.run.resume_from;
  o.checkpoint_on_signal = cfg.run.checkpoint_on_signal;
  o.run_identity = run_identity(cfg);  // Note [Run identity]
  o.config_json = config_json;
  o.log_interval = cfg.run.log_interval;
  o.eval_every = cfg.run.eval_every;
  o.metrics_file = cfg.run.metrics_file;
  o.tensorboard_dir = cfg.run.tensorboard_dir;
  o.trace_samples_dir = cfg.run.trace_samples_dir;
  o.enable_profiling = cfg.run.enable_profiling;
  o.peak_tflops = cfg.run.peak_tflops;
  o.stop_requested = [] { return stop_signal(); };
  o.faults = FaultPlan::from_env();
  return o;
}

// Before the first collective (Note in train/objective_check.h): a module ddptrain did not
// build, or a loss other than cross-entropy, is run once on two samples.
FitCheck fit_check(const TrainConfig& cfg, const DistContext& ctx) {
  FitCheck c;
  c.loss = cfg.optim.loss;
  const bool scripted = cfg.model.model == ModelKind::kTorchscript;
  c.run_forward = scripted || cfg.optim.loss != LossKind::kCrossEntropy;
  c.channels_last = uses_channels_last(cfg.model);
  c.device = ctx.device();
  c.model_name =
      scripted ? str("--model_path='", cfg.model.model_path, "'") : str("--model ", cfg.model.model);
  c.data_name = str("--dataset ", cfg.data.dataset);
  return c;
}

TrainResult train(const TrainConfig& cfg, const DistContext& ctx, const std::string& config_json) {
  const Logger& log = ctx.log();
  // Data: the real datasets decide channels, image size and classes; token datasets take
  // the model's block size and vocabulary.
  DataSplits data = make_datasets(cfg.data, token_spec(cfg.model), static_cast<uint64_t>(cfg.run.seed));
  log.info(str("dataset ", word(cfg.data.dataset), ": ", data.train->size(), " training samples",
               data.test ? str(", ", data.test->size(), " test samples") : std::string()));
  if (cfg.data.augment)
    log.info("augmentation: " + augment_summary(cfg.data.dataset));  // Note [Augmentation is a pure function]

  // Model: the same seed on every rank, so every rank builds the same weights (DDP's
  // broadcast then makes it certain); afterwards each rank draws from seed + rank.
  torch::manual_seed(static_cast<uint64_t>(cfg.run.seed));
  std::shared_ptr<Model> model =
      build_model(cfg.model, data.train->shape(),
                  cfg.dist.sync_bn ? sync_batchnorm_factory(ctx) : NormFactory(default_norm));
  if (!cfg.run.init_from.empty() && cfg.run.resume_from.empty()) {
    const auto weights = read_weights_file(cfg.run.init_from, log);
    try {
      load_state_dict(*model, weights, cfg.run.init_from);
    } catch (const Error& e) {  // the user's file does not fit the model: their input
      throw UsageError(str(e.what(), "; --init_from must hold weights of this --model with these sizes"));
    }
    log.info(str("initial weights from ", cfg.run.init_from));
  }
  model->to(ctx.device());
  torch::manual_seed(static_cast<uint64_t>(cfg.run.seed + ctx.rank()));
  if (cfg.model.activation_checkpointing == Recompute::kBlocks)
    log.info("activation checkpointing: each block is recomputed in backward");
  log.info(str("optimizer ", word(cfg.optim.optimizer)));
  const std::unique_ptr<torch::optim::Optimizer> optimizer = build_optimizer(cfg.optim, model->parameters());
  Trainable net = trainable(model, model->train_flops_per_sample(), model->describe());
  check_model_fits_data(net, *data.train, fit_check(cfg, ctx));
  TrainerOptions opts = trainer_options(cfg, config_json);  // the run identity: the user's flags
  if (cfg.run.keep_global_batch && !cfg.run.resume_from.empty()) {
    opts.grad_accum_steps = kept_accumulation(read_checkpoint_meta(cfg.run.resume_from), ctx.world_size(),
                                              cfg.data.batch_size, cfg.optim.grad_accum_steps);
    log.info(str("--keep_global_batch: ", opts.grad_accum_steps,
                 opts.grad_accum_steps == 1 ? " accumulation step keeps" : " accumulation steps keep",
                 " the checkpoint's global batch ",
                 static_cast<int64_t>(opts.batch_size) * opts.grad_accum_steps * ctx.world_size()));
  }
  Trainer trainer(ctx, std::move(net), *optimizer, opts, objective_for(cfg.optim.loss));
  return trainer.fit(*data.train, data.test.get());
}

}  // namespace ddptrain
