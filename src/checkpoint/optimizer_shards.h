// Note [Optimizer shard files]
// Under ZeRO (stages 1-3) no rank holds the whole optimizer state, and a checkpoint must not
// need one that does: the state is written as one file per rank's shard. Rank 0 still writes
// every file (DESIGN.md invariant 3, and a checkpoint complete without a shared file system):
// the ranks' shards reach it one at a time (a broadcast from rank r, so every rank issues the
// same collectives), and it writes each before the next arrives, so it holds its own shard
// and one other, never the whole. Files of the part "optimizer":
//  - optimizer.pt: the optimizer's archive with its parameter groups (options, learning
//    rates) and no state (the full optimizer of a sharded run holds none);
//  - optimizer.shard<r>.pt: {"state": [fields, numel]} (a pickle torch.load reads): rank r's
//    shard of every bucket, end to end, one row per state tensor (momentum; exp_avg,
//    exp_avg_sq[, max_exp_avg_sq]);
//  - optimizer.shards.json: the layout: the optimizer's kind and fields, world size, every
//    parameter's Adam step count (-1: no state yet), shape and memory order, and per rank its pieces
//    (parameter key, first element in the parameter's memory order, offset in the row, length). A parameter's
//    key is its index over the optimizer's parameter groups, as in the archive's state.
// Loading is pure arithmetic on the two layouts: each rank reads only the files that hold a
// piece of a parameter it needs (its new shard's, or all at stage 0), assembles those
// parameters' state and keeps its slices, so a checkpoint of world W and stage s resumes at
// any W' and s' (Note [Resume at another world size]); a rank holds its parameters' state,
// about 1/W' of the whole plus the parameters its shard boundaries cut, never the whole
// unless it is stage 0 (which holds it anyway).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

#include "checkpoint/checkpoint.h"
#include "ddp/zero_optimizer.h"

namespace ddptrain {

/// Every rank calls it (a collective). mine: this rank's [fields, numel] rows; by_rank: every
/// rank's pieces (the same on every rank); steps: each parameter's Adam step count by key (-1:
/// no state). Rank 0 writes the files of the part `name` through files.write.
void save_optimizer_shards(const DistContext& ctx, const torch::optim::Optimizer& full,
                           const std::string& name, const at::Tensor& mine,
                           const std::vector<std::vector<ShardFilePiece>>& by_rank,
                           const std::vector<int64_t>& steps, const PartFiles& files);

/// Fills full.state() for its parameters in `wanted` (TensorImpl pointers; null: all) from the
/// shard files of `name`, reading only the files that hold them. False when the checkpoint has
/// no shard files (its archive then held the state). Error naming origin when they do not
/// match this optimizer (kind, parameters, shapes) or are incomplete. with_state: gets the
/// parameters (TensorImpl pointers) the files hold state of, wanted or not.
bool load_optimizer_shards(torch::optim::Optimizer& full, const std::string& name, const PartFiles& files,
                           const std::set<const void*>* wanted, const std::string& origin,
                           std::set<const void*>* with_state = nullptr);

/// The shard files of a sharded optimizer's part `name`: every rank's shard reaches rank 0 in
/// turn, which writes it (nothing before the first step). A collective.
void save_sharded_optimizer(const ShardedOptimizer& sharded, const std::string& name, const PartFiles& files);
/// After the part's archive was loaded: this rank's slices from the checkpoint's shard files
/// (or, without any, from the full state the archive held); the full state is dropped.
void load_sharded_optimizer(ShardedOptimizer& sharded, const std::string& name, const PartFiles& files,
                            const std::string& origin);

}  // namespace ddptrain
