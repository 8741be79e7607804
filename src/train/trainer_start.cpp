#include "train/trainer_start.h"

#include <chrono>
#include <set>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "checkpoint/hf_files.h"
#include "checkpoint/weights_file.h"
#include "ddp/same_units.h"
#include "dist/every_rank.h"
#include "serialize/python_pickle.h"
#include "train/abandoned_branch.h"
#include "train/checkpoint_policy.h"
#include "train/fingerprint.h"
#include "train/resume.h"
#include "train/step_report.h"
#include "util/error.h"
#include "util/fnv.h"

namespace ddptrain {
namespace {

// Note [Run identity] for every program, the library's included: the optimizer's kind, its
// groups' learning rates and the shapes of the parameters it steps (the model's), under
// phrases a program's own entries do not use, and the sampler's seed ("seed", the CLI's flag:
// a mid-epoch resume skips the micro-batches of the checkpoint's order, so another seed would
// train some samples twice and others never). A library program that names no identity of its
// own so resumes (auto) only a run of the same model, optimizer and order; one that names
// entries of its own keeps them (entries a checkpoint lacks are not compared).
void add_default_identity(RunIdentity& id, const torch::optim::Optimizer& optimizer, uint64_t seed) {
  const char* kind = dynamic_cast<const torch::optim::AdamW*>(&optimizer)  ? "AdamW"
                     : dynamic_cast<const torch::optim::Adam*>(&optimizer) ? "Adam"
                     : dynamic_cast<const torch::optim::SGD*>(&optimizer)  ? "SGD"
                                                                           : "another";
  std::string lrs, shapes;
  for (const auto& g : optimizer.param_groups()) {
    lrs += str(lrs.empty() ? "" : ",", g.options().get_lr());
    for (const auto& p : g.params()) {
      for (const int64_t d : p.sizes()) shapes += std::to_string(d) + "x";
      shapes += ";";
    }
    shapes += "|";
  }
  id.emplace("optimizer kind", kind);
  id.emplace("learning rates", lrs);
  id.emplace("parameter shapes", hex_fingerprint(fnv1a(shapes)));
  id.emplace("seed", std::to_string(seed));
}

}  // namespace

TrainerOptions trainer_options_checked(TrainerOptions o, const torch::optim::Optimizer& optimizer,
                                       const DistContext& ctx, std::string& resumed_precision,
                                       std::shared_ptr<CheckpointFolderClaim>& claim, const Units* units) {
  const bool adamw = dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr;
  o.optim.lr_schedule = resolved_schedule(o.optim.lr_schedule, adamw);
  o.validate();
  // The Trainer's first collective: a rank still building units meets it (Note [The ranks
  // build the same units]).
  if (o.zero.stage >= 3 && ctx.communicates()) check_ranks_built_the_same_units(units, ctx);
  add_default_identity(o.run_identity, optimizer, o.loop.seed);
  if (claim) {  // the program's (the CLI's, by its flags): checked by this identity too
    if (claim->dir != o.checkpoint.dir)
      throw OptionError({{&o.checkpoint.dir, "checkpoint.dir"}},
                        str("{0}='", OptionError::literal(o.checkpoint.dir), "' is not the folder the given ",
                            "claim holds ('", OptionError::literal(claim->dir),
                            "'): give the Trainer the options the claim was made with"))
          .within(&o);
    DDP_USAGE_CHECK(
        !claim->taken, "the checkpoint folder claim given to this Trainer was given to another ",
        "already: a claim is one run's (its choice was that run's start); claim the folder again");
    claim->taken = true;
    take_claims_choice(o.checkpoint, *claim);
    try {
      on_every_rank(  // Note [Run identity]; each rank reads its own listing
          ctx, "the ranks' check of the claim's choice",
          [&] { refuse_another_runs(o, claim->resume, ctx.log()); },
          [](int64_t n) { return ranks_could_not(n, "accept the checkpoint folder's choice"); });
    } catch (const UsageError&) {  // Note [A branch a run abandons]: the mark may name another run's
      if (ctx.is_main()) drop_mark_of_another_run(claim->dir, o.run_identity, ctx.log());
      throw;
    }
  } else {  // Note [A run claims its checkpoint folder]
    claim = claim_checkpoint_folder(o, ctx);
  }
  const std::optional<CheckpointEntry>& resumed = claim->resume;
  resumed_precision = resumed ? precision_to_resume(resumed->meta) : "";
  if (o.loop.keep_global_batch && resumed) {
    int& accum = o.loop.grad_accum_steps;
    accum = kept_accumulation(resumed->meta, ctx.world_size(), o);
    ctx.log().info(str("keep_global_batch: ", accum,
                       accum == 1 ? " accumulation step keeps" : " accumulation steps keep",
                       " the checkpoint's global batch ", o.global_batch(ctx.world_size())));
    o.validate();  // what holds for the accumulation a user sets holds for this one (ZeRO's)
  }
  return o;
}

Trainable with_initial_weights(Trainable model, const TrainerOptions& o, const DistContext& ctx) {
  const Logger& log = ctx.log();
  const std::string& from = o.checkpoint.init_from;
  if (model.units && model.units->any_built_shard()) {
    DDP_USAGE_CHECK(
        o.zero.stage >= 3 && ctx.communicates(), "the module's units were sharded as built ",
        "(ShardAsBuilt), which only zero.stage 3 over more than one rank trains (here zero.stage ",
        o.zero.stage, ", world ", ctx.world_size(), "): build it without a UnitSink");
    DDP_USAGE_CHECK(from.empty() || !o.checkpoint.resume_from.empty(), "checkpoint.init_from='", from,
                    "' cannot be loaded into a module whose units were sharded as built: give the weights ",
                    "to the builder's ShardAsBuilt::Fill instead");
    return model;
  }
  if (from.empty()) return model;
  if (!o.checkpoint.resume_from.empty()) {
    log.info(str("init_from '", from, "' is not read: the run resumes '", o.checkpoint.resume_from, "'"));
    return model;
  }
  if (is_hf_folder(from)) {  // straight into the parameters, no copy of the model
    HfInitialWeights weights(from, log);
    weights.fill(*model.module);
    weights.finish();
    return model;
  }
  const auto start = std::chrono::steady_clock::now();
  const NamedTensors weights = read_weights_file(from, log);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double mib = 0;
  for (const auto& nt : weights) mib += static_cast<double>(nt.second.nbytes()) / (1 << 20);
  try {
    load_state_dict(*model.module, weights, from);
  } catch (const Error& e) {  // the user's file does not fit the model: their input
    throw OptionError(
        {{&o.checkpoint.init_from, "checkpoint.init_from"}},
        str(OptionError::literal(e.what()), "; {0} must hold weights of this model with these sizes"))
        .within(&o);
  }
  log.info(str("initial weights from ", from, " (", weights.size(), " tensors, ", static_cast<int64_t>(mib),
               " MiB of weights read in ", static_cast<int64_t>(seconds * 1000), " ms)"));
  return model;
}

void warn_of_parameters_not_shared(const torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                                   const DistContext& ctx, int zero_stage) {
  std::set<const void*> optimized, in_module;
  int64_t twice = 0;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) twice += optimized.insert(p.unsafeGetTensorImpl()).second ? 0 : 1;
  DDP_USAGE_CHECK(
      twice == 0, twice, " parameter tensors are in the optimizer's groups more than once, so each step ",
      "would update them more than once: LibTorch's module->parameters() lists a tensor registered ",
      "under two names twice (tied weights); build the optimizer from ddptrain::unique_parameters(*module)");
  int64_t tensors = 0, elements = 0;
  for (const auto& p : unique_parameters(module)) {
    in_module.insert(p.unsafeGetTensorImpl());
    if (p.requires_grad() && optimized.count(p.unsafeGetTensorImpl()) == 0) ++tensors, elements += p.numel();
  }
  if (tensors > 0)
    ctx.log().warn(str(tensors, " trainable parameter tensors (", with_commas(static_cast<double>(elements)),
                       " elements) are in no optimizer group: their gradients are reduced every step and "
                       "accumulate, never stepped or clipped; freeze them (requires_grad(false)) or give "
                       "them to the optimizer"));
  int64_t outside = 0;
  for (const void* p : optimized) outside += in_module.count(p) == 0 ? 1 : 0;
  // ZeRO shards what DDP holds, the module's parameters: the others would never be stepped.
  DDP_USAGE_CHECK(
      outside == 0 || zero_stage == 0 || !ctx.communicates(), outside,
      " parameter tensors the optimizer steps are not the module's, and zero.stage ", zero_stage,
      " steps only the module's parameters (it shards what DDP holds): make them parameters of the "
      "module, or use zero.stage 0");
  if (outside > 0)
    ctx.log().warn(str(outside,
                       " parameter tensors the optimizer steps are not the model's: DDP does not "
                       "average their gradients, so each rank steps them with its own and the "
                       "replicas differ (nor are they clipped; under fp16's loss scaling an overflow "
                       "in theirs skips the whole step on that rank alone); make them parameters of "
                       "the module"));
}

}  // namespace ddptrain
