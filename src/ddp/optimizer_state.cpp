#include "ddp/optimizer_state.h"

#include <algorithm>
#include <numeric>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "optim/fused_optimizers.h"
#include "util/error.h"

namespace ddptrain {

namespace optim = torch::optim;

std::vector<int64_t> memory_order(const at::Tensor& t) {
  std::vector<int64_t> order(static_cast<size_t>(t.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  return order;
}

at::Tensor flat_view(const at::Tensor& dense) {
  return dense.detach().permute(memory_order(dense)).view({-1});
}

at::Tensor flat_as(const at::Tensor& t, const at::Tensor& like) {
  return t.permute(memory_order(like)).reshape({-1});
}

OptimizerClass optimizer_kind(const optim::Optimizer& o) {
  if (dynamic_cast<const optim::SGD*>(&o)) return OptimizerClass::kSgd;
  if (dynamic_cast<const optim::AdamW*>(&o)) return OptimizerClass::kAdamW;
  if (dynamic_cast<const optim::Adam*>(&o)) return OptimizerClass::kAdam;
  throw UsageError(
      "ZeRO (TrainerOptions::zero.stage; ddptrain train --zero_stage) shards the state of "
      "torch::optim::SGD, Adam and AdamW; this optimizer is none of them (use one of those, or stage 0)");
}

const char* optimizer_kind_name(OptimizerClass k) {
  switch (k) {
    case OptimizerClass::kSgd:
      return "sgd";
    case OptimizerClass::kAdam:
      return "adam";
    case OptimizerClass::kAdamW:
      return "adamw";
  }
  return "?";
}

std::unique_ptr<optim::Optimizer> optimizer_like(const optim::Optimizer& full,
                                                 std::vector<optim::OptimizerParamGroup> g) {
  const OptimizerClass kind = optimizer_kind(full);  // refuses what ZeRO cannot shard, first
  if (is_fused_optimizer(full)) return fused_optimizer_like(full, std::move(g));
  switch (kind) {
    case OptimizerClass::kSgd:
      return std::make_unique<optim::SGD>(std::move(g),
                                          static_cast<const optim::SGDOptions&>(full.defaults()));
    case OptimizerClass::kAdam:
      return std::make_unique<optim::Adam>(std::move(g),
                                           static_cast<const optim::AdamOptions&>(full.defaults()));
    case OptimizerClass::kAdamW:
      return std::make_unique<optim::AdamW>(std::move(g),
                                            static_cast<const optim::AdamWOptions&>(full.defaults()));
  }
  return nullptr;
}

namespace {

// AMSGrad's running maximum is a third state tensor where any group uses it (a group may set
// its own amsgrad: the defaults' alone dropped that group's maximum from the shard files).
template <typename Options>
int adam_fields(const optim::Optimizer& full) {
  bool amsgrad = static_cast<const Options&>(full.defaults()).amsgrad();
  for (const auto& g : full.param_groups())
    amsgrad = amsgrad || static_cast<const Options&>(g.options()).amsgrad();
  return amsgrad ? 3 : 2;
}

}  // namespace

int state_fields(const optim::Optimizer& full) {
  switch (optimizer_kind(full)) {
    case OptimizerClass::kSgd:
      return 1;
    case OptimizerClass::kAdam:
      return adam_fields<optim::AdamOptions>(full);
    case OptimizerClass::kAdamW:
      return adam_fields<optim::AdamWOptions>(full);
  }
  return 0;
}

int group_state_fields(const optim::Optimizer& full, size_t g) {
  const auto& o = full.param_groups()[g].options();
  switch (optimizer_kind(full)) {
    case OptimizerClass::kSgd:
      return 1;
    case OptimizerClass::kAdam:
      return static_cast<const optim::AdamOptions&>(o).amsgrad() ? 3 : 2;
    case OptimizerClass::kAdamW:
      return static_cast<const optim::AdamWOptions&>(o).amsgrad() ? 3 : 2;
  }
  return 0;
}

bool group_has_state(const optim::Optimizer& full, size_t g) {
  if (optimizer_kind(full) != OptimizerClass::kSgd) return true;
  return static_cast<const optim::SGDOptions&>(full.param_groups()[g].options()).momentum() != 0;
}

std::vector<at::Tensor> state_tensors(optim::OptimizerParamState& s) {
  if (auto* sgd = dynamic_cast<optim::SGDParamState*>(&s)) return {sgd->momentum_buffer()};
  if (auto* a = dynamic_cast<optim::AdamWParamState*>(&s))
    return {a->exp_avg(), a->exp_avg_sq(), a->max_exp_avg_sq()};
  if (auto* a = dynamic_cast<optim::AdamParamState*>(&s))
    return {a->exp_avg(), a->exp_avg_sq(), a->max_exp_avg_sq()};
  return {};
}

int64_t state_step(optim::OptimizerParamState& s) {
  if (auto* a = dynamic_cast<optim::AdamWParamState*>(&s)) return a->step();
  if (auto* a = dynamic_cast<optim::AdamParamState*>(&s)) return a->step();
  return 0;
}

std::unique_ptr<optim::OptimizerParamState> make_state(const optim::Optimizer& full,
                                                       const std::vector<at::Tensor>& t, int64_t step) {
  auto adam_like = [&](auto s) {
    s->step(step);
    s->exp_avg(t[0]);
    s->exp_avg_sq(t[1]);
    if (t.size() > 2 && t[2].defined()) s->max_exp_avg_sq(t[2]);
    return std::unique_ptr<optim::OptimizerParamState>(std::move(s));
  };
  switch (optimizer_kind(full)) {
    case OptimizerClass::kSgd: {
      auto s = std::make_unique<optim::SGDParamState>();
      s->momentum_buffer(t[0]);
      return s;
    }
    case OptimizerClass::kAdam:
      return adam_like(std::make_unique<optim::AdamParamState>());
    case OptimizerClass::kAdamW:
      return adam_like(std::make_unique<optim::AdamWParamState>());
  }
  return nullptr;
}

std::vector<const void*> optimizer_param_keys(const torch::optim::Optimizer& full) {
  std::vector<const void*> keys;
  for (const auto& g : full.param_groups())
    for (const auto& p : g.params()) keys.push_back(p.unsafeGetTensorImpl());
  return keys;
}

}  // namespace ddptrain
