#include "optim/fused_optimizers.h"

#include <map>
#include <tuple>

#include "util/torch_compat.h"

namespace ddptrain {

namespace {

namespace optim = torch::optim;

// ATen's fused kernels take lists of one device and dtype; a group may mix them.
using ListKey = std::tuple<c10::DeviceType, c10::DeviceIndex, at::ScalarType>;

ListKey list_key(const at::Tensor& p) { return {p.device().type(), p.device().index(), p.scalar_type()}; }

// One float tensor per distinct step count and device (Note [Fused optimizers]).
class StepTensors {
 public:
  const at::Tensor& of(const at::Tensor& p, int64_t step) {
    auto& t = made_[{list_key(p), step}];
    if (!t.defined()) t = at::full({}, static_cast<double>(step), p.options().dtype(at::kFloat));
    return t;
  }

 private:
  std::map<std::pair<ListKey, int64_t>, at::Tensor> made_;
};

struct AdamLists {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
};

struct SgdLists {
  std::vector<at::Tensor> params, grads, buffers;
};

// `t` (a gradient or a state tensor of `p`) in p's memory layout. ATen's fused kernels walk
// the tensors' memory as one (the CPU's: another layout pairs each element with another's
// moment) or refuse mixed strides (CUDA's). A checkpoint's state keeps the layout it was saved
// in, while a resume with another --memory_format changes the parameters'; autograd's
// gradients follow their parameter's. A copy only where the layouts differ (once, for a state).
at::Tensor in_layout_of(const at::Tensor& p, const at::Tensor& t) {
  // As ATen's check of the fused kernels' lists: strides of size-1 dimensions do not count
  // (a 1x1 convolution's channels-last weight and its gradient from cuDNN differ only there).
  bool same = t.dim() == p.dim();
  for (int64_t d = 0; same && d < p.dim(); ++d)
    same = t.size(d) == p.size(d) && (p.size(d) == 1 || t.stride(d) == p.stride(d));
  if (same || !p.is_non_overlapping_and_dense()) return t;
  TORCH_CHECK(t.sizes() == p.sizes(), "fused optimizer: a state or gradient of shape ", t.sizes(),
              " for a parameter of shape ", p.sizes());
  return at::empty_like(p, at::MemoryFormat::Preserve).copy_(t);
}

at::Tensor run_closure(const optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  at::AutoGradMode grad(true);
  return closure();
}

}  // namespace

at::Tensor FusedAdamW::step(LossClosure closure) {
  at::Tensor loss = run_closure(closure);
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const optim::AdamWOptions&>(group.options());
    std::map<ListKey, AdamLists> lists;
    StepTensors steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "FusedAdamW does not support sparse gradients");
      auto& slot = state_[compat::optimizer_state_key(p)];
      if (!slot) {
        auto s = std::make_unique<optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        s->exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        if (o.amsgrad()) s->max_exp_avg_sq(at::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(s);
      }
      auto& s = static_cast<optim::AdamWParamState&>(*slot);
      s.step(s.step() + 1);
      s.exp_avg(in_layout_of(p, s.exp_avg()));
      s.exp_avg_sq(in_layout_of(p, s.exp_avg_sq()));
      if (o.amsgrad()) s.max_exp_avg_sq(in_layout_of(p, s.max_exp_avg_sq()));
      auto& l = lists[list_key(p)];
      l.params.push_back(p);
      l.grads.push_back(in_layout_of(p, p.grad()));
      l.exp_avgs.push_back(s.exp_avg());
      l.exp_avg_sqs.push_back(s.exp_avg_sq());
      if (o.amsgrad()) l.max_exp_avg_sqs.push_back(s.max_exp_avg_sq());
      l.steps.push_back(steps.of(p, s.step()));
    }
    const auto [beta1, beta2] = o.betas();
    for (auto& [key, l] : lists)
      compat::fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, l.steps, o.lr(),
                           beta1, beta2, o.weight_decay(), o.eps(), o.amsgrad());
  }
  return loss;
}

at::Tensor FusedSGD::step(LossClosure closure) {
  at::Tensor loss = run_closure(closure);
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const auto& o = static_cast<const optim::SGDOptions&>(group.options());
    TORCH_CHECK(!o.nesterov() || (o.momentum() > 0 && o.dampening() == 0),
                "FusedSGD: nesterov needs momentum > 0 and dampening 0");
    const bool with_buffers = o.momentum() != 0;
    // A parameter's first step takes its gradient as the momentum buffer: those with a new
    // buffer go in lists of their own (is_first_step).
    std::map<std::pair<ListKey, bool>, SgdLists> lists;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "FusedSGD does not support sparse gradients");
      bool first = false;
      at::Tensor buffer;
      if (with_buffers) {
        auto& slot = state_[compat::optimizer_state_key(p)];
        if (!slot) {
          auto s = std::make_unique<optim::SGDParamState>();
          s->momentum_buffer(at::empty_like(p, at::MemoryFormat::Preserve));
          slot = std::move(s);
          first = true;
        }
        auto& s = static_cast<optim::SGDParamState&>(*slot);
        s.momentum_buffer(in_layout_of(p, s.momentum_buffer()));
        buffer = s.momentum_buffer();
      }
      auto& l = lists[{list_key(p), first}];
      l.params.push_back(p);
      l.grads.push_back(in_layout_of(p, p.grad()));
      if (with_buffers) l.buffers.push_back(buffer);
    }
    for (auto& [key, l] : lists)
      compat::fused_sgd_(l.params, l.grads, l.buffers, o.weight_decay(), o.momentum(), o.lr(), o.dampening(),
                         o.nesterov(), /*is_first_step=*/key.second);
  }
  return loss;
}

bool is_fused_optimizer(const optim::Optimizer& opt) {
  return dynamic_cast<const FusedAdamW*>(&opt) || dynamic_cast<const FusedSGD*>(&opt);
}

std::unique_ptr<optim::Optimizer> fused_optimizer_like(const optim::Optimizer& full,
                                                       std::vector<optim::OptimizerParamGroup> groups) {
  if (dynamic_cast<const FusedAdamW*>(&full))
    return std::make_unique<FusedAdamW>(std::move(groups),
                                        static_cast<const optim::AdamWOptions&>(full.defaults()));
  if (dynamic_cast<const FusedSGD*>(&full))
    return std::make_unique<FusedSGD>(std::move(groups),
                                      static_cast<const optim::SGDOptions&>(full.defaults()));
  TORCH_CHECK(false, "fused_optimizer_like: the optimizer is not a fused one");
}

}  // namespace ddptrain
