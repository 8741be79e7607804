#include "config/train_from_config.h"

#include "checkpoint/checkpoint.h"
#include "checkpoint/weights_file.h"
#include "config/run_identity.h"
#include "data/augment.h"
#include "data/datasets.h"
#include "ddp/shard_as_built.h"
#include "ddp/sync_batchnorm.h"
#include "dist/every_rank.h"
#include "models/build_model.h"
#include "train/fault_hooks.h"
#include "train/objective_check.h"
#include "train/optimizer.h"
#include "train/resume.h"
#include "train/same_data.h"
#include "train/stop_signal.h"

namespace ddptrain {

DistOptionsResolved dist_options(const DistOptions& d) {
  DistOptionsResolved o;
  o.backend = d.backend;
  o.timeout = std::chrono::seconds(d.dist_timeout_s);
  o.rendezvous_timeout = std::chrono::seconds(d.rendezvous_timeout_s);
  o.flight_recorder = static_cast<size_t>(d.flight_recorder);
  return o;
}

TrainerOptions trainer_options(const TrainConfig& cfg, const std::string& config_json) {
  TrainerOptions o = cfg.trainer;  // the flags are bound to its fields
  o.channels_last = uses_channels_last(cfg.model);
  o.run_identity = run_identity(cfg);  // Note [Run identity]
  o.config_json = config_json;
  o.stop_requested = [] { return stop_signal(); };
  return o;
}

// Before the first collective (Note in train/objective_check.h): a module ddptrain did not
// build, or a loss other than cross-entropy, is run once on two samples.
FitCheck fit_check(const TrainConfig& cfg, const DistContext& ctx) {
  FitCheck c;
  c.loss = cfg.program.loss;
  const bool scripted = cfg.model.model == ModelKind::kTorchscript;
  c.run_forward = scripted || cfg.program.loss != LossKind::kCrossEntropy;
  c.channels_last = uses_channels_last(cfg.model);
  c.device = ctx.device();
  c.model_name =
      scripted ? str("--model_path='", cfg.model.model_path, "'") : str("--model ", cfg.model.model);
  c.data_name = str("--dataset ", cfg.data.dataset);
  c.loss_name = "--loss";
  return c;
}

std::string in_train_flag_words(const OptionError& e, const TrainConfig& cfg) {
  TrainConfig bound = cfg;
  const std::string& owner = e.owner();
  const void* part = owner == "DataOptions"        ? static_cast<const void*>(&bound.data)
                     : owner == "ModelOptions"     ? static_cast<const void*>(&bound.model)
                     : owner == "OptimizerOptions" ? static_cast<const void*>(&bound.optimizer)
                                                   : static_cast<const void*>(&bound.trainer);
  return in_flag_words(e, train_flags(bound), part);
}

DataSplits datasets_from(const TrainConfig& cfg, const TrainingSplit* trained) {
  try {
    return make_datasets(cfg.data, token_spec(cfg.model), cfg.trainer.loop.seed, trained);
  } catch (const OptionError& e) {  // a field of cfg.data: name its flag
    throw UsageError(in_train_flag_words(e, cfg));
  }
}

namespace {

// Note [Units sharded as built]: under zero_stage 3 over several ranks, gpt's and llama's
// units are sharded as the model is built, unless something must read the whole model first
// (a forward that checks its output, weights loaded after the build).
// The initial weights of a Hugging Face folder are then read a unit at a time, into the unit,
// once it is known whether a checkpoint is resumed instead (the CLI resolves resume_from auto
// first; a library caller may not have).
bool shards_as_built(const TrainConfig& cfg, const DistContext& ctx) {
  const auto& ck = cfg.trainer.checkpoint;
  return cfg.trainer.zero.stage >= 3 && ctx.communicates() && takes_unit_sink(cfg.model) &&
         !fit_check(cfg, ctx).run_forward &&
         (ck.init_from.empty() || (!cfg.model.init_from_hf.empty() && ck.resume_from != "auto"));
}

// The sink for build_model, and the folder it reads (unless a checkpoint is resumed), opened
// and checked whole before the model is built: a config.json whose sizes its files lack (a
// config copied from a larger model) would first build, and fill memory with, a model of its
// sizes.
struct UnitByUnit {
  std::unique_ptr<HfInitialWeights> weights;
  std::unique_ptr<ShardAsBuilt> sink;
};

// Every rank opens the folder before the first unit's broadcast; one that cannot (a node
// without the folder) makes them all stop at once instead of the others waiting in it.
std::unique_ptr<HfInitialWeights> open_on_every_rank(const std::string& dir, const DistContext& ctx) {
  std::unique_ptr<HfInitialWeights> weights;
  on_every_rank(  // Note [A failure on some ranks stops every rank]
      ctx, "the ranks' opening of --init_from_hf",
      [&] { weights = std::make_unique<HfInitialWeights>(dir, ctx.log()); },
      [&](int64_t n) {
        return ranks_could_not(n, "read --init_from_hf='" + dir + "'",
                               ": every rank reads the folder, so each node needs it");
      });
  return weights;
}

UnitByUnit unit_by_unit(const TrainConfig& cfg, const DistContext& ctx) {
  UnitByUnit u;
  if (!cfg.model.init_from_hf.empty() && cfg.trainer.checkpoint.resume_from.empty())
    u.weights = open_on_every_rank(cfg.model.init_from_hf, ctx);
  if (!shards_as_built(cfg, ctx)) return u;  // the whole model filled once built
  ShardAsBuilt::Fill fill;
  if (u.weights)
    fill = [w = u.weights.get()](const std::string& name, torch::nn::Module& unit) {
      w->fill(unit, name + ".");
    };
  u.sink = std::make_unique<ShardAsBuilt>(ctx, std::move(fill));
  return u;
}

TrainResult train_in_library_words(const TrainConfig& cfg, const DistContext& ctx,
                                   const std::string& config_json,
                                   std::shared_ptr<CheckpointFolderClaim> claim) {
  const Logger& log = ctx.log();
  // Data: the real datasets decide channels, image size and classes; token datasets take
  // the model's block size and vocabulary.
  // Every rank opens the data and they compare what they hold before the model is built from
  // its shape (a class count of its own on one rank would build another model; under ZeRO-3,
  // shard it with collectives of other sizes). The Trainer compares again for a library program.
  DataSplits data = open_data_on_every_rank(ctx, [&] { return datasets_from(cfg); });
  log.info(str("dataset ", word(cfg.data.dataset), ": ", data.train->size(), " training samples",
               data.test ? str(", ", data.test->size(), " test samples") : std::string()));
  if (cfg.data.augment)
    log.info("augmentation: " + augment_summary(cfg.data.dataset));  // Note [Augmentation is a pure function]

  // Model: the same seed on every rank, so every rank builds the same weights (DDP's
  // broadcast then makes it certain); afterwards each rank draws from seed + rank.
  torch::manual_seed(cfg.trainer.loop.seed);
  UnitByUnit units = unit_by_unit(cfg, ctx);
  const bool weights_read = units.weights != nullptr;
  std::shared_ptr<Model> model = build_model(
      cfg.model, data.train->shape(),
      cfg.dist.sync_bn ? sync_batchnorm_factory(ctx) : NormFactory(default_norm), units.sink.get());
  if (units.sink)
    log.info(str("ZeRO stage 3: ", units.sink->units_sharded(), " units sharded as they were built (",
                 units.sink->shard_bytes() / (1 << 20),
                 " MiB of them on this rank); the rest of the model is sharded once built"));
  if (units.weights) {  // the parameters outside the units
    units.weights->fill(*model);
    units.weights->finish();
    units.weights.reset();  // the folder's files closed (the sink's fill ran in the build)
  }
  model->to(ctx.device());
  torch::manual_seed(cfg.trainer.loop.seed + static_cast<uint64_t>(ctx.rank()));
  if (cfg.model.activation_checkpointing == Recompute::kBlocks)
    log.info("activation checkpointing: each block is recomputed in backward");
  log.info(str("optimizer ", word(cfg.optimizer.optimizer)));
  const std::unique_ptr<torch::optim::Optimizer> optimizer =
      build_optimizer(cfg.optimizer, unique_parameters(*model));
  Trainable net = trainable(model, model->train_flops_per_sample(), model->describe());
  if (const std::string warning = check_model_fits_data(net, *data.train, fit_check(cfg, ctx));
      !warning.empty())
    log.warn(warning);
  TrainerOptions opts = trainer_options(cfg, config_json);  // the run identity: the user's flags
  add_data_identity(opts.run_identity, *data.train);        // and an image folder's classes
  if (weights_read) opts.checkpoint.init_from.clear();      // read already, into the parameters
  Trainer trainer(ctx, std::move(net), *optimizer, opts,
                  objective_for(cfg.program.loss, cfg.program.fused_loss), std::move(claim));
  trainer.set_loop_hooks(std::make_shared<FaultHooks>(FaultPlan::from_env()));  // the failure tests'
  return trainer.fit(*data.train, data.test.get());
}

}  // namespace

std::shared_ptr<CheckpointFolderClaim> claim_checkpoint_folder(TrainConfig& cfg, const DistContext& ctx) {
  TrainerOptions o = cfg.trainer;
  o.run_identity = run_identity(cfg);
  try {
    auto claim = claim_checkpoint_folder(o, ctx, "--");  // by the flags
    take_claims_choice(cfg.trainer.checkpoint, *claim);
    return claim;
  } catch (const OptionError& e) {  // a field of the copy o: name its flag
    throw UsageError(in_train_flag_words(e, cfg));
  }
}

TrainResult train(const TrainConfig& cfg, const DistContext& ctx, const std::string& config_json,
                  std::shared_ptr<CheckpointFolderClaim> claim) {
  try {
    return train_in_library_words(cfg, ctx, config_json, std::move(claim));
  } catch (const OptionError& e) {  // a field of the Trainer's copy of cfg.trainer, or of cfg
    throw UsageError(in_train_flag_words(e, cfg));
  }
}

}  // namespace ddptrain
