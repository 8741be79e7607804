// The per-parameter state of the optimizers ZeRO shards (torch::optim::SGD, Adam, AdamW), as
// plain tensors: what a sharded optimizer slices, gathers and writes into shard files (Notes
// [ZeRO stage 1] and [Optimizer shard files]).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>

namespace ddptrain {

// The torch::optim class of an optimizer (the CLI's --optimizer choice is train/optimizer_options.h's
// OptimizerKind, a narrower set).
enum class OptimizerClass { kSgd, kAdam, kAdamW };

/// UsageError for any other optimizer.
OptimizerClass optimizer_kind(const torch::optim::Optimizer& o);
const char* optimizer_kind_name(OptimizerClass k);
/// An optimizer of full's kind and defaults over other parameter groups.
std::unique_ptr<torch::optim::Optimizer> optimizer_like(
    const torch::optim::Optimizer& full, std::vector<torch::optim::OptimizerParamGroup> groups);
/// Tensors in one parameter's entry: 1 (SGD momentum); 2 or, with amsgrad in any group, 3
/// (Adam's moments; the shard files' rows).
int state_fields(const torch::optim::Optimizer& full);
/// Those of group g's parameters: 3 only where the group itself uses amsgrad (the third row of
/// the others' is not theirs).
int group_state_fields(const torch::optim::Optimizer& full, size_t g);
/// Whether the parameters of group g have an entry once stepped (SGD without momentum: none).
bool group_has_state(const torch::optim::Optimizer& full, size_t g);
/// An entry's tensors (momentum; exp_avg, exp_avg_sq, max_exp_avg_sq: undefined when absent).
std::vector<at::Tensor> state_tensors(torch::optim::OptimizerParamState& s);
/// Adam's step count of an entry (0 for SGD).
int64_t state_step(torch::optim::OptimizerParamState& s);
/// An entry of full's kind from its tensors and step count.
std::unique_ptr<torch::optim::OptimizerParamState> make_state(const torch::optim::Optimizer& full,
                                                              const std::vector<at::Tensor>& t, int64_t step);

/// The key of each of full's parameters (by TensorImpl): its index over the parameter groups.
std::vector<const void*> optimizer_param_keys(const torch::optim::Optimizer& full);

/// The dimensions of t from the largest stride to the smallest: its memory order.
std::vector<int64_t> memory_order(const at::Tensor& t);
/// A dense tensor's elements in memory order, as a 1-D view of its storage (writable).
at::Tensor flat_view(const at::Tensor& dense);
/// t's elements in the memory order of `like` (a view when t has like's layout, else a copy).
at::Tensor flat_as(const at::Tensor& t, const at::Tensor& like);

}  // namespace ddptrain
