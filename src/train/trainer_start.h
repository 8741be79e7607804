// What the Trainer checks and prepares before it trains (its constructor): the options as it
// runs them (validated, the default run identity added, the checkpoint to resume chosen), the
// initial weights, and the parameters the optimizer and the module do not share.
#pragma once

#include <string>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "dist/dist_context.h"
#include "train/folder_claim.h"
#include "train/trainable.h"
#include "train/trainer_options.h"

namespace ddptrain {

/// The options as the Trainer runs them: lr_schedule auto resolved from the optimizer, then
/// validated (a library user's options get the checks the CLI's flags get, naming the field),
/// the checkpoint folder claimed (Note [A run claims its checkpoint folder]: `claim`, made here
/// where null; a given one's choice is checked by the Trainer's identity) and resume_from its
/// choice, and under keep_global_batch the accumulation that keeps a resumed checkpoint's
/// global batch. The resumed checkpoint's recorded precision goes to `resumed_precision`.
/// Under zero_stage 3 its first collective checks that every rank built the module's `units`
/// alike (Note [The ranks build the same units]).
TrainerOptions trainer_options_checked(TrainerOptions o, const torch::optim::Optimizer& optimizer,
                                       const DistContext& ctx, std::string& resumed_precision,
                                       std::shared_ptr<CheckpointFolderClaim>& claim, const Units* units);

/// checkpoint.init_from: the module starts from these weights, unless a checkpoint is resumed.
/// A module whose units were sharded as built (Note [Units sharded as built]) holds no memory
/// for them: only zero_stage 3 over several ranks trains it, and its builder gave the weights.
Trainable with_initial_weights(Trainable model, const TrainerOptions& o, const DistContext& ctx);

/// Parameters the optimizer and the module do not share, said once (a warning each): a
/// trainable parameter no optimizer group holds, and one the optimizer steps outside the module
/// (a UsageError under a ZeRO stage that shards: it steps only the module's).
void warn_of_parameters_not_shared(const torch::nn::Module& module, torch::optim::Optimizer& optimizer,
                                   const DistContext& ctx, int zero_stage);

}  // namespace ddptrain
