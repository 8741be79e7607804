#include "ddp/zero_optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "ddp/optimizer_state.h"
#include "optim/grad_clip.h"
#include "util/error.h"
#include "util/torch_compat.h"

namespace ddptrain {

ShardedOptimizer::ShardedOptimizer(torch::optim::Optimizer& full, std::vector<at::Tensor> params,
                                   const std::vector<std::vector<size_t>>& buckets, const DistContext& ctx,
                                   std::function<at::Tensor(size_t bucket)> shard_values)
    : full_(full), params_(std::move(params)), ctx_(ctx), values_in_shards_(static_cast<bool>(shard_values)) {
  optimizer_kind(full_);  // a UsageError for another optimizer
  DDP_USAGE_CHECK(full_.state().empty(),
                  "ZeRO (TrainerOptions::zero.stage; ddptrain train --zero_stage) takes an optimizer that "
                  "has not stepped yet");
  std::vector<int64_t> numels;
  for (size_t i = 0; i < params_.size(); ++i) {
    numels.push_back(params_[i].numel());
    index_of_[params_[i].unsafeGetTensorImpl()] = i;
  }
  layout_ = shard_buckets(numels, buckets, ctx_.world_size());
  for (const auto& bucket : buckets) bucket_options_.push_back(params_[bucket.at(0)].options());
  std::unordered_map<const void*, int> group_of;
  for (size_t g = 0; g < full_.param_groups().size(); ++g)
    for (const auto& p : full_.param_groups()[g].params())
      group_of[p.unsafeGetTensorImpl()] = static_cast<int>(g);
  for (const auto& g : full_.param_groups()) group_sizes_.push_back(g.params().size());
  std::vector<std::vector<at::Tensor>> views(full_.param_groups().size());
  for (size_t b = 0; b < layout_.size(); ++b)
    for (const ShardPiece& piece : layout_[b].by_rank[static_cast<size_t>(ctx_.rank())]) {
      auto it = group_of.find(params_[piece.param].unsafeGetTensorImpl());
      if (it == group_of.end()) continue;  // not optimized (at stage 0 neither)
      at::Tensor view = shard_values
                            ? shard_values(b).narrow(0, piece.shard_offset, piece.length)
                            : flat_view(params_[piece.param]).narrow(0, piece.param_offset, piece.length);
      own_.push_back({b, piece, view});
      views[static_cast<size_t>(it->second)].push_back(view);
    }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (size_t g = 0; g < views.size(); ++g) {
    inner_group_.push_back(views[g].empty() ? -1 : static_cast<int>(groups.size()));
    if (!views[g].empty()) groups.emplace_back(views[g], full_.param_groups()[g].options().clone());
  }
  if (!groups.empty()) inner_ = optimizer_like(full_, std::move(groups));
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::attach_gradients() {
  torch::NoGradGuard no_grad;
  for (auto& o : own_) {
    if (shard_of_) {
      o.view.mutable_grad() = unused_ && unused_(o.piece.param)
                                  ? at::Tensor()
                                  : shard_of_(o.bucket).narrow(0, o.piece.shard_offset, o.piece.length);
      continue;
    }
    const at::Tensor& p = params_[o.piece.param];
    o.view.mutable_grad() = p.grad().defined()
                                ? flat_as(p.grad(), p).narrow(0, o.piece.param_offset, o.piece.length)
                                : at::Tensor();
  }
}

std::vector<at::Tensor> ShardedOptimizer::attached_gradients() const {
  std::vector<at::Tensor> out;
  for (const auto& o : own_)
    if (o.view.grad().defined()) out.push_back(o.view.grad());
  return out;
}

at::Tensor ShardedOptimizer::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  at::Tensor sq = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(ctx_.device()));
  for (const auto& g : attached_gradients()) sq += g.to(at::kDouble).pow(2).sum();
  std::vector<at::Tensor> total{sq};
  ctx_.all_reduce_sum(total, "ZeRO stage 2: the gradient's global norm from the shards");
  // On the device, no host read (Note [No host sync in a step], optim/grad_clip.h); a
  // coefficient of 1 leaves the gradients as they are.
  const at::Tensor norm = total[0].sqrt().reshape({});
  const at::Tensor coef = clip_coefficient(norm, max_norm);
  for (auto& g : attached_gradients()) g.mul_(coef);
  return norm;
}

void ShardedOptimizer::step() {
  torch::NoGradGuard no_grad;
  std::vector<size_t> sizes;
  for (const auto& g : full_.param_groups()) sizes.push_back(g.params().size());
  DDP_USAGE_CHECK(sizes == group_sizes_, "the optimizer's parameter groups changed after ZeRO sharded them (",
                  group_sizes_.size(), " groups then, ", sizes.size(),
                  " now): zero.stage >= 1 steps the groups it was built with, and would never step new "
                  "ones; give the optimizer every group before building the Trainer");
  if (inner_) {
    for (size_t g = 0; g < inner_group_.size(); ++g)  // the schedule set full's learning rate
      if (inner_group_[g] >= 0)
        inner_->param_groups()[static_cast<size_t>(inner_group_[g])].set_options(
            full_.param_groups()[g].options().clone());
    if (!shard_of_) attach_gradients();  // stage 2: attached (and unscaled, clipped) before
    inner_->step();
    for (auto& o : own_) o.view.mutable_grad().reset();
  }
  stepped_ = true;
  if (values_in_shards_) return;  // Note [ZeRO stage 3]: the next forward gathers them
  std::vector<at::Tensor> mine = zero_shards();
  for (size_t b = 0; b < layout_.size(); ++b)
    for (const ShardPiece& piece : layout_[b].by_rank[static_cast<size_t>(ctx_.rank())])
      mine[b]
          .narrow(0, piece.shard_offset, piece.length)
          .copy_(flat_view(params_[piece.param]).narrow(0, piece.param_offset, piece.length));
  all_gather_pieces(
      mine, /*include_mine=*/false, "ZeRO all_gather of the updated parameters",
      [&](const ShardPiece& piece, const at::Tensor& values) {
        flat_view(params_[piece.param]).narrow(0, piece.param_offset, piece.length).copy_(values);
      });
}

std::vector<at::Tensor> ShardedOptimizer::zero_shards() const {
  std::vector<at::Tensor> out;
  for (size_t b = 0; b < layout_.size(); ++b)  // in the bucket's dtype: another would round its values
    out.push_back(at::zeros({layout_[b].shard_numel}, bucket_options_[b]));
  return out;
}

void ShardedOptimizer::all_gather_pieces(
    const std::vector<at::Tensor>& mine, bool include_mine, const char* what,
    const std::function<void(const ShardPiece&, const at::Tensor&)>& put) {
  for (size_t b = 0; b < layout_.size(); ++b) all_gather_bucket(b, mine[b], include_mine, what, put);
}

void ShardedOptimizer::all_gather_bucket(
    size_t b, const at::Tensor& mine, bool include_mine, const char* what,
    const std::function<void(const ShardPiece&, const at::Tensor&)>& put) {
  if (layout_[b].shard_numel == 0) return;
  std::vector<at::Tensor> per_rank;
  for (int r = 0; r < ctx_.world_size(); ++r) per_rank.push_back(at::empty_like(mine));
  ctx_.all_gather(mine, per_rank, what);
  for (int r = 0; r < ctx_.world_size(); ++r) {
    if (r == ctx_.rank() && !include_mine) continue;
    for (const ShardPiece& piece : layout_[b].by_rank[static_cast<size_t>(r)])
      put(piece, per_rank[static_cast<size_t>(r)].narrow(0, piece.shard_offset, piece.length));
  }
}

std::vector<at::Tensor> ShardedOptimizer::my_state_shards(int k) const {
  std::vector<at::Tensor> mine = zero_shards();
  for (const Own& o : own_) {
    auto it = inner_->state().find(compat::optimizer_state_key(o.view));
    if (it == inner_->state().end()) continue;
    const at::Tensor t = state_tensors(*it->second)[static_cast<size_t>(k)];
    if (t.defined()) mine[o.bucket].narrow(0, o.piece.shard_offset, o.piece.length).copy_(t);
  }
  return mine;
}

void ShardedOptimizer::visit_full_state(
    const std::function<void(size_t, const std::vector<at::Tensor>&)>& fn) {
  torch::NoGradGuard no_grad;
  if (!stepped_ || params_.empty()) return;  // the same on every rank
  std::unordered_map<const void*, size_t> key_of;
  std::vector<bool> has_state;
  std::vector<size_t> own_fields;  // per key: its group's (amsgrad's maximum only where it uses it)
  for (size_t g = 0; g < full_.param_groups().size(); ++g)
    for (const auto& p : full_.param_groups()[g].params()) {
      key_of[p.unsafeGetTensorImpl()] = has_state.size();
      has_state.push_back(group_has_state(full_, g));
      own_fields.push_back(static_cast<size_t>(group_state_fields(full_, g)));
    }
  const int fields = state_fields(full_);
  std::vector<std::vector<at::Tensor>> shards;
  for (int k = 0; k < fields; ++k) shards.push_back(my_state_shards(k));
  for (size_t b = 0; b < layout_.size(); ++b) {
    std::map<size_t, std::vector<at::Tensor>> state;  // param index -> its fields
    for (int k = 0; k < fields; ++k)
      all_gather_bucket(
          b, shards[static_cast<size_t>(k)][b], /*include_mine=*/true,
          "ZeRO all_gather of a bucket's optimizer state (fingerprint)",
          [&](const ShardPiece& piece, const at::Tensor& values) {
            auto& t = state[piece.param];
            if (t.empty())
              for (int f = 0; f < fields; ++f) t.push_back(at::zeros_like(params_[piece.param]));
            flat_view(t[static_cast<size_t>(k)]).narrow(0, piece.param_offset, piece.length).copy_(values);
          });
    for (auto& [param, tensors] : state) {
      auto it = key_of.find(params_[param].unsafeGetTensorImpl());
      if (it == key_of.end() || !has_state[it->second]) continue;
      tensors.resize(own_fields[it->second]);
      fn(it->second, tensors);
    }
  }
}

std::vector<int64_t> ShardedOptimizer::agreed_steps(
    const std::unordered_map<const void*, int64_t>& key_of) const {
  // [0, K): the sum of the steps of the pieces this rank holds state for, per key; [K, 2K): their
  // count. A parameter's pieces step together (its gradient is defined on every rank or on none).
  const auto keys = static_cast<int64_t>(key_of.size());
  std::vector<double> sums(static_cast<size_t>(2 * keys), 0.0);
  if (inner_)
    for (const Own& o : own_) {
      auto it = inner_->state().find(compat::optimizer_state_key(o.view));
      auto key = key_of.find(params_[o.piece.param].unsafeGetTensorImpl());
      if (it == inner_->state().end() || key == key_of.end()) continue;
      sums[static_cast<size_t>(key->second)] += static_cast<double>(state_step(*it->second));
      sums[static_cast<size_t>(keys + key->second)] += 1;
    }
  std::vector<at::Tensor> counts{at::tensor(sums, at::kDouble)};
  ctx_.all_reduce_sum(counts, "ZeRO optimizer step counts");
  const at::Tensor total = counts[0].cpu().contiguous();
  const double* t = total.data_ptr<double>();
  std::vector<int64_t> steps;
  for (int64_t k = 0; k < keys; ++k) steps.push_back(t[keys + k] > 0 ? std::llround(t[k] / t[keys + k]) : -1);
  return steps;
}

std::optional<StateShards> ShardedOptimizer::state_shards() const {
  torch::NoGradGuard no_grad;
  if (!stepped_ || params_.empty()) return std::nullopt;  // no state yet (the same on every rank)
  std::unordered_map<const void*, int64_t> key_of;        // a parameter's key: its index over the groups
  const auto keys = optimizer_param_keys(full_);
  for (size_t k = 0; k < keys.size(); ++k) key_of[keys[k]] = static_cast<int64_t>(k);
  StateShards out;
  out.steps = agreed_steps(key_of);
  std::vector<int64_t> base;  // each bucket's shard in the rows
  for (size_t b = 0; b < layout_.size(); ++b)
    base.push_back(b == 0 ? 0 : base.back() + layout_[b - 1].shard_numel);
  std::vector<at::Tensor> rows;  // per state field, every bucket's shard end to end
  for (int k = 0; k < state_fields(full_); ++k) rows.push_back(at::cat(my_state_shards(k)));
  out.mine = at::stack(rows);
  out.by_rank.resize(static_cast<size_t>(ctx_.world_size()));
  for (size_t b = 0; b < layout_.size(); ++b)
    for (size_t r = 0; r < out.by_rank.size(); ++r)
      for (const ShardPiece& pc : layout_[b].by_rank[r]) {
        auto it = key_of.find(params_[pc.param].unsafeGetTensorImpl());
        if (it != key_of.end())
          out.by_rank[r].push_back({it->second, pc.param_offset, base[b] + pc.shard_offset, pc.length});
      }
  return out;
}

std::set<const void*> ShardedOptimizer::owned_parameters() const {
  std::set<const void*> owned;
  for (const Own& o : own_) owned.insert(params_[o.piece.param].unsafeGetTensorImpl());
  return owned;
}

void ShardedOptimizer::adopt_loaded_state(bool loaded) {
  if (loaded) stepped_ = true;  // even owning nothing
  scatter_full_state();
}

void ShardedOptimizer::release_full_state() { full_.state().clear(); }

void ShardedOptimizer::say_dropped_state(const std::set<const void*>& with_state) const {
  int64_t dropped = 0;
  for (const void* p : with_state) dropped += index_of_.count(p) == 0;
  if (dropped > 0 && ctx_.is_main())
    ctx_.log().warn(str("ZeRO: the checkpoint holds the optimizer state of ", dropped,
                        " parameters that this run does not train (frozen), which the shards do not keep: "
                        "this run's checkpoints lack it, and unfreezing them later starts it afresh (stage 0 "
                        "keeps it)"));
}

void ShardedOptimizer::scatter_full_state() {
  torch::NoGradGuard no_grad;
  if (full_.state().empty()) return;  // a checkpoint taken before the first step
  stepped_ = true;
  std::set<const void*> with_state;  // an archive's (stage 0's) whole state
  for (const auto& group : full_.param_groups())
    for (const at::Tensor& p : group.params())
      if (full_.state().count(compat::optimizer_state_key(p))) with_state.insert(p.unsafeGetTensorImpl());
  say_dropped_state(with_state);
  for (const Own& o : own_) {
    const at::Tensor& p = params_[o.piece.param];
    auto it = full_.state().find(compat::optimizer_state_key(p));
    if (it == full_.state().end()) continue;
    std::vector<at::Tensor> slices;
    for (const at::Tensor& t : state_tensors(*it->second))
      slices.push_back(t.defined() ? flat_as(t, p).narrow(0, o.piece.param_offset, o.piece.length).clone()
                                   : at::Tensor());
    inner_->state()[compat::optimizer_state_key(o.view)] = make_state(full_, slices, state_step(*it->second));
  }
  release_full_state();
}

int64_t ShardedOptimizer::state_bytes() const {
  int64_t n = 0;
  if (!inner_) return n;
  for (auto& entry : inner_->state())
    for (const auto& t : state_tensors(*entry.second))
      if (t.defined()) n += static_cast<int64_t>(t.nbytes());
  return n;
}

}  // namespace ddptrain
