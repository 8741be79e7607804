#include "ddp/zero_optimizer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "util/error.h"
#include "util/torch_compat.h"

namespace ddptrain {
namespace {

namespace optim = torch::optim;

// The dimensions of t from the largest stride to the smallest: its memory order.
std::vector<int64_t> memory_order(const at::Tensor& t) {
  std::vector<int64_t> order(static_cast<size_t>(t.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  return order;
}

// A dense tensor's elements in memory order, as a 1-D view of its storage (writable).
at::Tensor flat_view(const at::Tensor& dense) { return dense.detach().permute(memory_order(dense)).view({-1}); }

// t's elements in the memory order of `like` (a view when t has like's layout, else a copy).
at::Tensor flat_as(const at::Tensor& t, const at::Tensor& like) { return t.permute(memory_order(like)).reshape({-1}); }

enum class Kind { kSgd, kAdam, kAdamW };

Kind kind_of(const optim::Optimizer& o) {
  if (dynamic_cast<const optim::SGD*>(&o)) return Kind::kSgd;
  if (dynamic_cast<const optim::AdamW*>(&o)) return Kind::kAdamW;
  if (dynamic_cast<const optim::Adam*>(&o)) return Kind::kAdam;
  throw UsageError("--zero_stage 1 shards the state of torch::optim::SGD, Adam and AdamW; this optimizer is none "
                   "of them (use one of those, or --zero_stage 0)");
}

std::unique_ptr<optim::Optimizer> same_kind(const optim::Optimizer& full, std::vector<optim::OptimizerParamGroup> g) {
  switch (kind_of(full)) {
    case Kind::kSgd:
      return std::make_unique<optim::SGD>(std::move(g), static_cast<const optim::SGDOptions&>(full.defaults()));
    case Kind::kAdam:
      return std::make_unique<optim::Adam>(std::move(g), static_cast<const optim::AdamOptions&>(full.defaults()));
    case Kind::kAdamW:
      return std::make_unique<optim::AdamW>(std::move(g), static_cast<const optim::AdamWOptions&>(full.defaults()));
  }
  return nullptr;
}

// How many state tensors one parameter's entry holds (momentum; exp_avg, exp_avg_sq and, with
// amsgrad, max_exp_avg_sq), and whether parameters of the group have an entry once stepped.
int state_fields(const optim::Optimizer& full) {
  switch (kind_of(full)) {
    case Kind::kSgd: return 1;
    case Kind::kAdam: return static_cast<const optim::AdamOptions&>(full.defaults()).amsgrad() ? 3 : 2;
    case Kind::kAdamW: return static_cast<const optim::AdamWOptions&>(full.defaults()).amsgrad() ? 3 : 2;
  }
  return 0;
}

std::vector<at::Tensor> state_tensors(optim::OptimizerParamState& s) {
  if (auto* sgd = dynamic_cast<optim::SGDParamState*>(&s)) return {sgd->momentum_buffer()};
  if (auto* a = dynamic_cast<optim::AdamWParamState*>(&s)) return {a->exp_avg(), a->exp_avg_sq(), a->max_exp_avg_sq()};
  if (auto* a = dynamic_cast<optim::AdamParamState*>(&s)) return {a->exp_avg(), a->exp_avg_sq(), a->max_exp_avg_sq()};
  return {};
}

int64_t state_step(optim::OptimizerParamState& s) {
  if (auto* a = dynamic_cast<optim::AdamWParamState*>(&s)) return a->step();
  if (auto* a = dynamic_cast<optim::AdamParamState*>(&s)) return a->step();
  return 0;
}

std::unique_ptr<optim::OptimizerParamState> make_state(const optim::Optimizer& full, const std::vector<at::Tensor>& t,
                                                       int64_t step) {
  auto adam_like = [&](auto s) {
    s->step(step);
    s->exp_avg(t[0]);
    s->exp_avg_sq(t[1]);
    if (t.size() > 2 && t[2].defined()) s->max_exp_avg_sq(t[2]);
    return std::unique_ptr<optim::OptimizerParamState>(std::move(s));
  };
  switch (kind_of(full)) {
    case Kind::kSgd: {
      auto s = std::make_unique<optim::SGDParamState>();
      s->momentum_buffer(t[0]);
      return s;
    }
    case Kind::kAdam: return adam_like(std::make_unique<optim::AdamParamState>());
    case Kind::kAdamW: return adam_like(std::make_unique<optim::AdamWParamState>());
  }
  return nullptr;
}

}  // namespace

ShardedOptimizer::ShardedOptimizer(torch::optim::Optimizer& full, std::vector<at::Tensor> params,
                                   const std::vector<std::vector<size_t>>& buckets, const DistContext& ctx,
                                   std::function<at::Tensor(size_t bucket)> shard_values)
    : full_(full), params_(std::move(params)), ctx_(ctx), values_in_shards_(static_cast<bool>(shard_values)) {
  kind_of(full_);  // a UsageError for another optimizer
  DDP_USAGE_CHECK(full_.state().empty(), "--zero_stage 1 takes an optimizer that has not stepped yet");
  std::vector<int64_t> numels;
  for (size_t i = 0; i < params_.size(); ++i) {
    numels.push_back(params_[i].numel());
    index_of_[params_[i].unsafeGetTensorImpl()] = i;
  }
  layout_ = shard_buckets(numels, buckets, ctx_.world_size());
  std::unordered_map<const void*, int> group_of;
  for (size_t g = 0; g < full_.param_groups().size(); ++g)
    for (const auto& p : full_.param_groups()[g].params()) group_of[p.unsafeGetTensorImpl()] = static_cast<int>(g);
  std::vector<std::vector<at::Tensor>> views(full_.param_groups().size());
  for (size_t b = 0; b < layout_.size(); ++b)
    for (const ShardPiece& piece : layout_[b].by_rank[static_cast<size_t>(ctx_.rank())]) {
      auto it = group_of.find(params_[piece.param].unsafeGetTensorImpl());
      if (it == group_of.end()) continue;  // not optimized (at stage 0 neither)
      at::Tensor view = shard_values ? shard_values(b).narrow(0, piece.shard_offset, piece.length)
                                     : flat_view(params_[piece.param]).narrow(0, piece.param_offset, piece.length);
      own_.push_back({b, piece, view});
      views[static_cast<size_t>(it->second)].push_back(view);
    }
  std::vector<optim::OptimizerParamGroup> groups;
  for (size_t g = 0; g < views.size(); ++g) {
    inner_group_.push_back(views[g].empty() ? -1 : static_cast<int>(groups.size()));
    if (!views[g].empty()) groups.emplace_back(views[g], full_.param_groups()[g].options().clone());
  }
  if (!groups.empty()) inner_ = same_kind(full_, std::move(groups));
}

ShardedOptimizer::~ShardedOptimizer() = default;

void ShardedOptimizer::attach_gradients() {
  torch::NoGradGuard no_grad;
  for (auto& o : own_) {
    if (shard_of_) {
      o.view.mutable_grad() = shard_of_(o.bucket).narrow(0, o.piece.shard_offset, o.piece.length);
      continue;
    }
    const at::Tensor& p = params_[o.piece.param];
    o.view.mutable_grad() =
        p.grad().defined() ? flat_as(p.grad(), p).narrow(0, o.piece.param_offset, o.piece.length) : at::Tensor();
  }
}

std::vector<at::Tensor> ShardedOptimizer::attached_gradients() const {
  std::vector<at::Tensor> out;
  for (const auto& o : own_)
    if (o.view.grad().defined()) out.push_back(o.view.grad());
  return out;
}

double ShardedOptimizer::clip_grad_norm(double max_norm) {
  torch::NoGradGuard no_grad;
  at::Tensor sq = at::zeros({1}, at::TensorOptions().dtype(at::kDouble).device(ctx_.device()));
  for (const auto& g : attached_gradients()) sq += g.to(at::kDouble).pow(2).sum();
  std::vector<at::Tensor> total{sq};
  ctx_.all_reduce_sum(total, "ZeRO stage 2: the gradient's global norm from the shards");
  const double norm = std::sqrt(total[0].item<double>());
  const double coef = max_norm / (norm + 1e-6);  // as torch.nn.utils.clip_grad_norm_
  if (coef < 1)
    for (auto& g : attached_gradients()) g.mul_(coef);
  return norm;
}

void ShardedOptimizer::step() {
  torch::NoGradGuard no_grad;
  if (inner_) {
    for (size_t g = 0; g < inner_group_.size(); ++g)  // the schedule set full's learning rate
      if (inner_group_[g] >= 0)
        inner_->param_groups()[static_cast<size_t>(inner_group_[g])].set_options(full_.param_groups()[g].options().clone());
    if (!shard_of_) attach_gradients();  // stage 2: attached (and unscaled, clipped) before
    inner_->step();
    for (auto& o : own_) o.view.mutable_grad().reset();
  }
  stepped_ = true;
  if (values_in_shards_) return;  // Note [ZeRO stage 3]: the next forward gathers them
  std::vector<at::Tensor> mine = zero_shards();
  for (size_t b = 0; b < layout_.size(); ++b)
    for (const ShardPiece& piece : layout_[b].by_rank[static_cast<size_t>(ctx_.rank())])
      mine[b].narrow(0, piece.shard_offset, piece.length)
          .copy_(flat_view(params_[piece.param]).narrow(0, piece.param_offset, piece.length));
  all_gather_pieces(mine, /*include_mine=*/false, "ZeRO all_gather of the updated parameters",
                    [&](const ShardPiece& piece, const at::Tensor& values) {
                      flat_view(params_[piece.param]).narrow(0, piece.param_offset, piece.length).copy_(values);
                    });
}

std::vector<at::Tensor> ShardedOptimizer::zero_shards() const {
  std::vector<at::Tensor> out;
  for (const auto& b : layout_) out.push_back(at::zeros({b.shard_numel}, params_[0].options()));  // buckets imply params
  return out;
}

void ShardedOptimizer::all_gather_pieces(const std::vector<at::Tensor>& mine, bool include_mine, const char* what,
                                         const std::function<void(const ShardPiece&, const at::Tensor&)>& put) {
  for (size_t b = 0; b < layout_.size(); ++b) {
    if (layout_[b].shard_numel == 0) continue;
    std::vector<at::Tensor> per_rank;
    for (int r = 0; r < ctx_.world_size(); ++r) per_rank.push_back(at::empty_like(mine[b]));
    ctx_.all_gather(mine[b], per_rank, what);
    for (int r = 0; r < ctx_.world_size(); ++r) {
      if (r == ctx_.rank() && !include_mine) continue;
      for (const ShardPiece& piece : layout_[b].by_rank[static_cast<size_t>(r)])
        put(piece, per_rank[static_cast<size_t>(r)].narrow(0, piece.shard_offset, piece.length));
    }
  }
}

bool ShardedOptimizer::group_has_state(size_t g) const {
  if (kind_of(full_) != Kind::kSgd) return true;
  return static_cast<const optim::SGDOptions&>(full_.param_groups()[g].options()).momentum() != 0;
}

void ShardedOptimizer::gather_full_state() {
  torch::NoGradGuard no_grad;
  if (!stepped_ || params_.empty()) return;  // the same on every rank
  // Adam's step count is the same in every entry; a rank that owns no piece learns it here.
  double step = 0, have = 0;
  if (inner_ && !inner_->state().empty()) step = static_cast<double>(state_step(*inner_->state().begin()->second)), have = 1;
  std::vector<at::Tensor> count{at::tensor({step, have}, at::kDouble)};
  ctx_.all_reduce_sum(count, "ZeRO optimizer step count");
  const int64_t steps = count[0][1].item<double>() > 0
                            ? std::llround(count[0][0].item<double>() / count[0][1].item<double>()) : 0;
  const int fields = state_fields(full_);
  std::vector<std::vector<at::Tensor>> full(static_cast<size_t>(fields), std::vector<at::Tensor>(params_.size()));
  for (int k = 0; k < fields; ++k) {
    std::vector<at::Tensor> mine = zero_shards();
    for (const Own& o : own_) {
      auto it = inner_->state().find(compat::optimizer_state_key(o.view));
      if (it == inner_->state().end()) continue;
      const at::Tensor t = state_tensors(*it->second)[static_cast<size_t>(k)];
      if (t.defined()) mine[o.bucket].narrow(0, o.piece.shard_offset, o.piece.length).copy_(t);
    }
    all_gather_pieces(mine, /*include_mine=*/true, "ZeRO all_gather of optimizer state for a checkpoint",
                      [&](const ShardPiece& piece, const at::Tensor& values) {
                        at::Tensor& t = full[static_cast<size_t>(k)][piece.param];
                        if (!t.defined()) t = at::zeros_like(params_[piece.param]);
                        flat_view(t).narrow(0, piece.param_offset, piece.length).copy_(values);
                      });
  }
  for (size_t g = 0; g < full_.param_groups().size(); ++g) {
    if (!group_has_state(g)) continue;
    for (const auto& p : full_.param_groups()[g].params()) {
      const size_t i = index_of_.at(p.unsafeGetTensorImpl());
      std::vector<at::Tensor> tensors;
      for (int k = 0; k < fields; ++k) tensors.push_back(full[static_cast<size_t>(k)][i]);
      if (tensors[0].defined()) full_.state()[compat::optimizer_state_key(p)] = make_state(full_, tensors, steps);
    }
  }
}

void ShardedOptimizer::release_full_state() { full_.state().clear(); }

void ShardedOptimizer::scatter_full_state() {
  torch::NoGradGuard no_grad;
  if (full_.state().empty()) return;  // a checkpoint taken before the first step
  stepped_ = true;
  for (const Own& o : own_) {
    const at::Tensor& p = params_[o.piece.param];
    auto it = full_.state().find(compat::optimizer_state_key(p));
    if (it == full_.state().end()) continue;
    std::vector<at::Tensor> slices;
    for (const at::Tensor& t : state_tensors(*it->second))
      slices.push_back(t.defined() ? flat_as(t, p).narrow(0, o.piece.param_offset, o.piece.length).clone() : at::Tensor());
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
