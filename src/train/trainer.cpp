#include "train/trainer.h"

#include <cmath>

#include "checkpoint/checkpoint.h"
#include "checkpoint/optimizer_shards.h"
#include "data/distributed_sampler.h"
#include "data/epoch_plan.h"
#include "data/loader.h"
#include "ddp/fully_sharded.h"
#include "ddp/zero_optimizer.h"
#include "dist/every_rank.h"
#include "models/build_model.h"
#include "obs/memory.h"
#include "train/epoch_summary.h"
#include "train/evaluate.h"
#include "train/fingerprint.h"
#include "train/objective_check.h"
#include "train/optimizer.h"
#include "train/resume.h"
#include "train/run_reporter.h"
#include "train/same_data.h"
#include "train/step_report.h"
#include "train/stop_vote.h"
#include "train/trace_callbacks.h"
#include "train/train_step.h"
#include "train/trainer_impl.h"
#include "train/trainer_run.h"
#include "train/trainer_start.h"
#include "train/training_split.h"
#include "train/vector_math_first_calls.h"
#include "util/error.h"

namespace ddptrain {
namespace {

// Why a resumed run has nothing left to train (max_steps reached, or every epoch done), or
// "" when it has. The same on every rank: it reads the checkpoint's position only.
std::string nothing_left_to_train(const TrainerOptions& o, int64_t global_step, int start_epoch) {
  if (o.loop.max_steps > 0 && global_step >= o.loop.max_steps)
    return str(
        "the checkpoint is at step ", global_step, " and max_steps is ", o.loop.max_steps,
        ": raise max_steps (TrainerOptions::loop.max_steps; ddptrain train --max_steps) to train further");
  if (start_epoch > o.loop.epochs)
    return str("the checkpoint completed epoch ", start_epoch - 1, " and epochs is ", o.loop.epochs,
               ": raise epochs (TrainerOptions::loop.epochs; ddptrain train --epochs) to train further");
  return "";
}

// Whether most of the module's weights are 4-D (a convolutional model: its fp32 peak on a GPU
// is TF32's, obs/mfu.h gpu_peak_kind).
bool mostly_convolutions(const torch::nn::Module& m) {
  int64_t conv = 0, all = 0;
  for (const auto& p : m.parameters()) {
    all += p.numel();
    if (p.dim() == 4) conv += p.numel();
  }
  return 2 * conv > all;
}

std::string schedule_line(const TrainerOptions& o, double base_lr, const LrHorizon& h) {
  switch (o.optim.lr_schedule) {
    case LrSchedule::kStepCosine:
      return str("lr ", base_lr, ": linear warmup over ", h.warmup(o), " steps, then cosine to ",
                 base_lr * o.optim.min_lr_ratio, " at step ", h.last_step);
    case LrSchedule::kEpochCosine:
      return str("lr ", base_lr, ": cosine per epoch over ", o.loop.epochs, " epochs",
                 o.loop.max_steps > 0 ? str(" (max_steps ", o.loop.max_steps,
                                            " may stop the run before the last: the rate is lowered at "
                                            "each epoch's start only)")
                                      : std::string());
    case LrSchedule::kAuto:  // resolved by trainer_options_checked()
    case LrSchedule::kConstant:
      break;
  }
  return str("lr ", base_lr, ", constant");
}

}  // namespace

Trainer::Impl::Impl(const DistContext& ctx, Trainable model, torch::optim::Optimizer& optimizer,
                    TrainerOptions opts, Objective objective, std::shared_ptr<CheckpointFolderClaim> claim)
    : ctx_(ctx),
      claim_(std::move(claim)),
      opts_(
          trainer_options_checked(std::move(opts), optimizer, ctx, resumed_precision_, claim_, model.units)),
      model_(with_initial_weights(std::move(model), opts_, ctx)),
      optimizer_(optimizer),
      objective_(std::move(objective)),
      base_lr_(optimizer.param_groups()[0].options().get_lr()),
      group_base_lr_([&] {
        std::vector<double> lrs;
        for (auto& g : optimizer.param_groups()) lrs.push_back(g.options().get_lr());
        return lrs;
      }()),
      start_((ctx.log().info(str("model ", model_.description, ": ",
                                 with_commas(static_cast<double>(count_parameters(*model_.module))),
                                 " parameters")),
              measure_start(opts_, ctx, model_.flops_per_sample, resumed_precision_,
                            mostly_convolutions(*model_.module)))),
      ddp_(std::make_unique<DistributedDataParallel>(
          model_.module, ctx, ddp_setup(opts_, ctx, *model_.module, model_.units, start_.backward_s))),
      scaler_({start_.precision.grad_scaler, opts_.precision.scaler_init_scale, 2.0, 0.5,
               opts_.precision.scaler_growth_interval}),
      state_{*model_.module, optimizer_, scaler_},
      parts_(training_parts(*model_.module, optimizer_)) {
  // Before the first step (Note [The first parallel call of a vector math function]).
  make_first_vector_math_calls();
  // After DDP's start-up broadcast, so the collectives see plain contiguous tensors; every
  // rank converts the same way. See Note [Channels last].
  if (opts_.channels_last) to_channels_last(*model_.module);
  ctx.log().info(str("DDP: world ", ctx.world_size(), ", backend ", ctx.backend_name(), ", device ",
                     ctx.device().str(), ", ", ddp_->num_buckets(), " gradient buckets, ",
                     at::get_num_threads(), " intra-op threads per rank",
                     opts_.channels_last ? ", channels-last layout" : ""));
  warn_of_parameters_not_shared(*model_.module, optimizer_, ctx_, opts_.zero.stage);
  if (opts_.zero.stage >= 3 && ctx_.communicates()) shard_parameters();
  if (opts_.zero.stage >= 1) shard_optimizer();
  // Building, loading and sharding the model, the kernel probe left out (Note [Units sharded as
  // built]): for the run record.
  loaded_peak_bytes_ = std::max(start_.peak_bytes_before_probe, memory_stats(ctx_.device()).peak_bytes);
  loaded_peak_rss_bytes_ = peak_rss_bytes();
}

// Note [ZeRO stage 3]: after the layout change (the flat buffers keep each parameter's
// strides). The model's forward runs with the root unit gathered; the checkpoint part "model"
// stays the full state_dict: every unit is gathered around a save and a load.
void Trainer::Impl::shard_parameters() {
  fsdp_ = std::make_unique<FullyShardedParams>(ddp_->parameters(), ddp_->buckets(), model_.units, ctx_);
  FullyShardedParams* f = fsdp_.get();
  ddp_->on_bucket_grads([f](size_t b) { f->release(b); });
  model_.forward = [f, forward = model_.forward](const at::Tensor& x) { return f->forward(forward, x); };
  state_.fsdp = f;
  for (CheckpointPart& part : parts_) {
    if (part.name != "model") continue;
    part.before_save = [f] { f->gather_all(); };
    part.after_save = [f] { f->release_all(); };
    part.load = [f, load = part.load](const std::string& bytes, const std::string& origin) {
      f->gather_all();
      load(bytes, origin);
      f->refresh_shards();
      f->release_all();
    };
  }
  const size_t units = f->buckets().size();
  ctx_.log().info(str("ZeRO stage 3: the parameters are sharded in ", units,
                      units == 1 ? " unit (" : " units (", model_.units ? model_.units->size() : 0,
                      " named by the model, and the root)"));
}

// The whole parameters on every rank (a collective under zero_stage 3), e.g. after fit().
void Trainer::Impl::gather_parameters() {
  if (fsdp_) fsdp_->gather_all();
}

// Note [ZeRO stage 1]: after the layout change (the shards are views of the parameters'
// memory). The checkpoint part "optimizer" writes its state as shard files and loads it from
// shard files or a stage-0 archive (Note [Optimizer shard files]).
void Trainer::Impl::shard_optimizer() {
  if (!ctx_.communicates()) {
    ctx_.log().warn(
        str("zero_stage ", opts_.zero.stage, " at world 1: nothing to shard over one rank, so it trains ",
            "and holds memory as stage 0 (it shards once the run has more ranks, e.g. a resume at world 2)"));
    return;
  }
  std::function<at::Tensor(size_t)> shard_values;
  if (fsdp_) shard_values = [f = fsdp_.get()](size_t b) { return f->shard(b); };
  sharded_ =
      std::make_unique<ShardedOptimizer>(optimizer_, ddp_->parameters(), ddp_->buckets(), ctx_, shard_values);
  if (opts_.zero.stage >= 2)  // Note [ZeRO stage 2]
    sharded_->use_shard_gradients([ddp = ddp_.get()](size_t b) { return ddp->shard_gradient(b); },
                                  [ddp = ddp_.get()](size_t i) { return ddp->unused_by_all(i); });
  state_.sharded = sharded_.get();
  for (CheckpointPart& part : parts_) {
    if (part.name != "optimizer") continue;
    ShardedOptimizer* s = sharded_.get();  // Note [Optimizer shard files]
    part.save_more = [s, name = part.name](const PartFiles& files) {
      save_sharded_optimizer(*s, name, files);
    };
    part.load_more = [s, name = part.name](const PartFiles& files) {
      load_sharded_optimizer(*s, name, files, files.dir);
    };
  }
  ctx_.log().info(str("ZeRO stage ", opts_.zero.stage, ": each rank holds the optimizer state",
                      opts_.zero.stage >= 2 ? " and the averaged gradients" : "",
                      opts_.zero.stage >= 3 ? " and the parameters (between their uses)" : "", " of 1/",
                      ctx_.world_size(), " of the parameters' elements"));
}

// The optimizer's state (from the shards under zero_stage >= 1, a bucket at a time: a collective).
std::string Trainer::Impl::optimizer_fingerprint_hex() {
  return hex_fingerprint(sharded_ ? optimizer_fingerprint(*sharded_, optimizer_)
                                  : optimizer_fingerprint(optimizer_));
}

Trainer::Trainer(const DistContext& ctx, Trainable model, torch::optim::Optimizer& optimizer,
                 TrainerOptions opts, Objective objective, std::shared_ptr<CheckpointFolderClaim> claim)
    : impl_(std::make_unique<Impl>(ctx, std::move(model), optimizer, std::move(opts), std::move(objective),
                                   std::move(claim))) {}

Trainer::~Trainer() = default;

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  impl_->user_callbacks_.push_back(std::move(callback));
}

void Trainer::set_loop_hooks(std::shared_ptr<LoopHooks> hooks) { impl_->hooks_ = std::move(hooks); }

void Trainer::add_checkpoint_part(CheckpointPart part) { impl_->parts_.push_back(std::move(part)); }

TrainResult Trainer::fit(Dataset& train, const Dataset* test) {
  // The run ends with its fit (a Trainer fits once): its folder is free for another Trainer
  // then, whatever holds this one (Note [A run claims its checkpoint folder]).
  struct Release {
    std::shared_ptr<CheckpointFolderClaim>& claim;
    ~Release() { claim.reset(); }
  } release{impl_->claim_};
  // Note [A torchrun job's restarts]: a run stopped on a signal may be restarted uncounted,
  // however its stop ended (a peer SIGKILLed after torchrun's grace fails a collective here).
  const auto keep_marker_if = [&](bool stopped) {  // no claim: a second fit, refused
    const auto& asked = impl_->opts_.stop_requested;
    if (impl_->claim_) impl_->claim_->keep_job_marker = stopped || (asked && asked() != 0);
  };
  try {
    TrainResult result = impl_->fit(train, test);
    keep_marker_if(result.stopped_by_signal != 0);
    return result;
  } catch (...) {
    keep_marker_if(false);
    throw;
  }
}

const Precision& Trainer::precision() const { return impl_->start_.precision; }

DistributedDataParallel& Trainer::ddp() { return *impl_->ddp_; }

TrainResult Trainer::Impl::fit(Dataset& train, const Dataset* test) {
  const Logger& log = ctx_.log();
  DDP_USAGE_CHECK(model_.module && model_.forward && objective_.loss,
                  "Trainer: the module, its forward and the objective's loss must be given");
  DDP_USAGE_CHECK(
      !fitted_,
      "Trainer::fit was called a second time: a Trainer trains one run (a second fit would "
      "resume the first's checkpoint again and count its steps twice); build a new Trainer for "
      "another run, with TrainerOptions::init_from or checkpoint.resume_from saying where it starts");
  fitted_ = true;
  check_ranks_hold_the_same_data(ctx_, {{"training", &train}, {"test", test}});
  // The module's output fits the loss: a clear error on every rank, not LibTorch's from inside
  // the first step (the CLI checks its own words first: config/train_from_config.cpp).
  check_objective_fits(model_, train, objective_,
                       {LossKind::kCrossEntropy, true, opts_.channels_last, ctx_.device(),
                        "the module (" + model_.description + ")", "the training data"});
  Run run(*this, train, test);
  TrainResult result;
  if (!resume(run, result)) {
    accept_run();
    return result;
  }
  const bool trains = result.nothing_to_train.empty();  // else it makes the evaluation owed only
  if (trains) {
    describe_data(run);
    plan_schedule(run);
  } else if (run.resumed_horizon) {
    state_.lr_horizon = *run.resumed_horizon;  // the run record's: the checkpoint's schedule
  }
  // Each rank opens its own reports (its sample trace, its profile's folder; rank 0 the metrics
  // file and TensorBoard's): one that cannot stops the others with it, not in the next collective
  // (Note [A failure on some ranks stops every rank]).
  on_every_rank(
      ctx_, "the run's reports (the metrics file, TensorBoard, the traces)",
      [&] { run.callbacks = callbacks_for(run); },
      [](int64_t n) {
        return ranks_could_not(n, "open the run's reports (the metrics file, TensorBoard, the traces)");
      });
  accept_run();
  const bool stopped_at_start = trains && stop_during_start(run);
  bool stopping = !trains || stopped_at_start;
  if (run.owed && !stopped_at_start) stopping = make_owed_evaluation(run, result) || stopping;
  for (int epoch = run.start_epoch; epoch <= opts_.loop.epochs && !stopping; ++epoch) {
    state_.epoch = epoch;
    stopping = train_epoch(run);
    stopping = finish_epoch(run, stopping, result);
  }
  result.last_checkpoint = run.checkpoints->last_checkpoint();
  result.global_step = state_.global_step;
  result.run_steps = state_.run_steps;
  result.stopped_by_signal = state_.stopped_by_signal;
  result.stop_requested_by = state_.stop_requested_by;
  gather_parameters();  // the module is whole when fit() returns
  result.fingerprint = hex_fingerprint(state_fingerprint(*model_.module));
  log.info_all_ranks(str("parameter fingerprint: ", result.fingerprint));
  result.optimizer_fingerprint = optimizer_fingerprint_hex();
  log.info_all_ranks("optimizer state fingerprint: " + result.optimizer_fingerprint);
  // The samples as trained (an epoch's short last step counts what it trained, not a whole batch)
  // over the steps' time (the epochs' less their step checkpoints).
  const double steps_time = run.train_time - state_.step_save_s;
  result.samples_per_s =
      steps_time > 0 ? static_cast<double>(run.reporter->samples_trained()) / steps_time : 0.0;
  return result;
}

// Nothing refuses the run after this (Note [A run claims its checkpoint folder]): the branch it
// abandons is set aside, by its whole identity (never another run's checkpoints), and the
// program's part of the start is done (the CLI's config.json). A collective.
void Trainer::Impl::accept_run() {
  set_aside_abandoned_branch(claim_->dir, claim_->resume, ctx_);
  // Note [A failure on some ranks stops every rank]: rank 0 writes (a disk may be full). Every
  // rank meets the collective, whichever set the call.
  const auto& then = claim_->on_run_accepted;
  on_every_rank(
      ctx_, "the program's start (CheckpointFolderClaim::on_run_accepted)",
      [&] {
        if (then) then();
      },
      [](int64_t n) {
        return ranks_could_not(n, "do the program's start (CheckpointFolderClaim::on_run_accepted)");
      });
}

// A stop asked for during start-up (Note [Agreed stop]): the run ends before its first step,
// with nothing trained and nothing saved.
bool Trainer::Impl::stop_during_start(Run& run) {
  const StopRequest stop = run.vote.agreed_now();
  if (!stop) return false;
  record_stop(stop, run.vote.local_signal());
  ctx_.log().warn(str("stopping before the first step on ", stop_origin(),
                      ", received during start-up: nothing trained, nothing saved"));
  return true;
}

// The epoch's batches as this run trains them (an error where an epoch has none), in the log.
void Trainer::Impl::describe_data(Run& run) {
  const Logger& log = ctx_.log();
  const int64_t K = opts_.loop.grad_accum_steps;
  if (run.batches <= 0)
    throw OptionError({{&opts_.data.batch_size, "data.batch_size"}},
                      str("an epoch has no full batch per rank (", run.sampler.num_samples(),
                          " samples, {0}=", opts_.data.batch_size, "); lower {0} or add data"))
        .within(&opts_);
  if (const int64_t left = run.sampler.num_samples() % opts_.data.batch_size; left != 0)
    log.info(opts_.data.drop_last
                 ? str("each epoch drops each rank's last ", left, left == 1 ? " sample" : " samples",
                       " (a partial batch; drop_last=false, --no-drop_last, trains it)")
                 : str("each epoch's last batch holds ", left, left == 1 ? " sample" : " samples",
                       " per rank (drop_last=false: --no-drop_last)"));
  if (run.batches % K != 0)
    log.info(str("the last optimizer step of each epoch accumulates ", run.batches % K,
                 " micro-batches instead of ", K, " (its loss is averaged over ", run.batches % K, ")"));
  if (!run.test && opts_.loop.eval_every > 0)
    log.info("no test split: nothing is evaluated (the dataset has none; eval_every has nothing to do)");
  const DatasetShape shape = run.train.shape();
  log.info(str("data: ", run.train.size(), " samples, ", run.steps_per_epoch,
               " steps per epoch, global batch ", opts_.global_batch(ctx_.world_size()),
               shape.is_tokens() ? str(" sequences of ", shape.block_size, " tokens") : std::string()));
}

// The built-in callbacks in their order, then the user's.
std::vector<std::shared_ptr<Callback>> Trainer::Impl::callbacks_for(Run& run) {
  RunFacts facts{start_.precision,
                 start_.peak,
                 model_.flops_per_sample,
                 run.train.shape().block_size,
                 at::get_num_threads(),
                 loaded_peak_bytes_,
                 loaded_peak_rss_bytes_,
                 claim_ ? claim_->restart_count : ctx_.restart_count(),
                 claim_ && claim_->same_torchrun_job};
  run.reporter = std::make_shared<RunReporter>(ctx_, opts_, *ddp_, timer_, std::move(facts), state_);
  std::vector<std::shared_ptr<Callback>> c{run.reporter};
  if (!opts_.report.trace_samples_dir.empty())
    c.push_back(
        std::make_shared<SampleTrace>(opts_.report.trace_samples_dir, ctx_.rank(), ctx_.world_size()));
  if (opts_.report.enable_profiling)
    c.push_back(std::make_shared<Profiler>(
        opts_.checkpoint.dir, ctx_,
        TraceSchedule{opts_.report.profile_first_step - 2, 1, opts_.report.profile_steps}));
  // The user's before the checkpoint policy: a step's or a stop's checkpoint holds what their
  // on_step_end and on_epoch_end made of it (an EMA, a counter). An epoch's own save comes
  // before its evaluation (CheckpointPolicy::before_evaluation), after on_epoch_trained.
  c.insert(c.end(), user_callbacks_.begin(), user_callbacks_.end());
  run.checkpoints = std::make_shared<CheckpointPolicy>(ctx_, opts_, start_.precision, parts_, *hooks_,
                                                       training_split_record(run.train));
  c.push_back(run.checkpoints);
  return c;
}

// Resume: model, optimizer, RNG state, the loss scale and the position in the data. False
// when the checkpoint leaves nothing to train (the result says why).
bool Trainer::Impl::resume(Run& run, TrainResult& result) {
  if (opts_.checkpoint.resume_from.empty()) return true;
  const CheckpointMeta meta = load_checkpoint(opts_.checkpoint.resume_from, ctx_, parts_);
  if (meta.extra.contains("grad_scaler") && scaler_.enabled()) {
    scaler_.load(grad_scaler_state_from_json(meta.extra["grad_scaler"]));
    const GradScalerState s = scaler_.state();
    ctx_.log().info(str("loss scale ", s.scale, " from the checkpoint, ", s.growth_tracker,
                        " finite steps counted toward its growth (the initial scale is a fresh run's)"));
  }
  run.start_epoch = meta.epoch_complete ? meta.epoch + 1 : meta.epoch;
  state_.epoch = run.start_epoch;  // the run record (written before the loop) names it
  const int world = ctx_.world_size();
  check_training_set_size(meta, run.train.size(), run.files, opts_.checkpoint.resume_from, ctx_);
  const ResumePoint at = resume_point(meta, world, opts_);
  run.start_micro = at.micro;  // in this run's batches
  run.rest = at.rest;
  if (run.rest &&
      run.rest->end < 0)  // a checkpoint from before plans were recorded (and --drop_last existed)
    run.rest->end = EpochPlan::fresh(run.train.size(), run.rest->world, run.rest->batch).end;
  state_.global_step = result.global_step = meta.global_step;
  state_.lr_step_offset = lr_step_offset(meta, world, opts_.data.batch_size, opts_.loop.grad_accum_steps);
  if (meta.extra.contains("lr_horizon")) run.resumed_horizon = LrHorizon::from_json(meta.extra["lr_horizon"]);
  // The warmup counts in the global batch of the run that began the schedule; a checkpoint from
  // before that was recorded: in its own run's.
  run.warmup_batch = run.resumed_horizon && run.resumed_horizon->warmup_steps >= 0
                         ? run.resumed_horizon->warmup_batch
                         : checkpoint_global_batch(meta, opts_);
  if (run.resumed_horizon) {  // the checkpoint's run's next learning rate, in its own steps
    const double before =
        run.resumed_horizon->kind == LrSchedule::kEpochCosine
            ? run.start_epoch
            : static_cast<double>(meta.global_step) + meta.extra.value("lr_step_offset", 0.0);
    run.resumed_lr = scheduled_lr(*run.resumed_horizon, opts_, base_lr_, before);
  }
  ctx_.log().info(str("resumed from ", opts_.checkpoint.resume_from, ": step ", meta.global_step,
                      ", continuing at epoch ", run.start_epoch,
                      run.rest ? std::string(" (its rest)") : str(" micro-batch ", run.start_micro)));
  if (meta.world_size != world) {  // Note [Resume at another world size]
    state_.resumed_from_world = meta.world_size;
    state_.samples_left_in_epoch = run.rest ? run.rest->end - run.rest->done : 0;
    ctx_.log().info(str("resumed at world ", world, " from a checkpoint written at world ", meta.world_size,
                        ": ", with_commas(static_cast<double>(state_.samples_left_in_epoch)),
                        " samples left in epoch ", run.start_epoch));
  }
  // Another world size or batch_size: a step averages another number of samples at the
  // schedule's learning rate (keep_global_batch keeps it instead).
  if (const int64_t was = checkpoint_global_batch(meta, opts_), now = opts_.global_batch(world);
      was != now && !opts_.loop.keep_global_batch)
    ctx_.log().warn(str("the global batch is ", now, " samples a step; the checkpoint's run's was ", was,
                        ": each optimizer step averages ", now,
                        " at the schedule's learning rate (not scaled); "
                        "keep_global_batch (--keep_global_batch) keeps ",
                        was, " by changing the accumulation"));
  run.owed = owed_evaluation(ctx_, meta, opts_.checkpoint.resume_from);  // Note [Evaluation owed]
  if (run.owed && (!run.test || opts_.loop.eval_every == 0)) {
    ctx_.log().warn(
        str("epoch ", run.owed->epoch, "'s evaluation was not made by the run that trained it, ",
            "and this run ", run.test ? "evaluates never (eval_every 0)" : "has no test data",
            ": it is not made (evaluate(), train/evaluate.h, makes it from the checkpoint; so does "
            "ddptrain eval for a checkpoint of ddptrain train)"));
    run.owed.reset();
  }
  result.nothing_to_train = nothing_left_to_train(opts_, meta.global_step, run.start_epoch);
  if (result.nothing_to_train.empty()) return true;
  ctx_.log().info(str("nothing to train: ", result.nothing_to_train, " (no new checkpoint)"));
  if (run.owed) return true;  // fit() makes the evaluation, and trains nothing
  gather_parameters();
  result.fingerprint = hex_fingerprint(state_fingerprint(*model_.module));
  result.optimizer_fingerprint = optimizer_fingerprint_hex();
  return false;
}

// Note [Schedule horizon]: the global step the run ends at unless stopped early (--max_steps, or
// the end of the last epoch counted from where this run starts), the schedule's length, and
// what a resume changed of the checkpoint's.
void Trainer::Impl::plan_schedule(Run& run) {
  const int64_t K = opts_.loop.grad_accum_steps, B = opts_.data.batch_size;
  const int world = ctx_.world_size();
  int64_t first_epoch = run.steps_per_epoch - std::min(run.start_micro, run.batches) / K;
  if (run.rest) first_epoch = (run.rest->rest_batches(world, B) + K - 1) / K;
  int64_t last =
      state_.global_step + first_epoch + run.steps_per_epoch * (opts_.loop.epochs - run.start_epoch);
  if (opts_.loop.max_steps > 0) last = std::min(last, opts_.loop.max_steps);
  state_.lr_horizon = LrHorizon::of(opts_, last, state_.lr_step_offset, B * K * world, run.warmup_batch);
  ctx_.log().info("schedule: " + schedule_line(opts_, base_lr_, state_.lr_horizon));
  warn_of_a_warmup_past_the_end(ctx_.log(), state_.lr_horizon, opts_);
  if (!run.resumed_horizon) return;
  const double now = scheduled_lr(state_.lr_horizon, opts_, base_lr_, schedule_position());
  state_.lr_change = horizon_change(*run.resumed_horizon, state_.lr_horizon, run.resumed_lr, now);
  if (state_.lr_change) ctx_.log().warn(state_.lr_change->describe(state_.lr_horizon));
}

// Where the schedule stands: the next optimizer step's position in steps of this run's global
// batch (step_cosine), or the epoch (epoch_cosine).
double Trainer::Impl::schedule_position() const {
  if (opts_.optim.lr_schedule == LrSchedule::kEpochCosine) return state_.epoch;
  return static_cast<double>(state_.global_step) + state_.lr_step_offset;
}

}  // namespace ddptrain
