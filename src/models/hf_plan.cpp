#include "models/hf_plan.h"

#include <torch/csrc/autograd/grad_mode.h>

#include "util/error.h"

namespace ddptrain {

void plan_once(std::map<std::string, HfSource>& got, const std::string& ours, HfSource source,
               const std::string& origin) {
  const auto twice = got.find(ours);
  DDP_USAGE_CHECK(twice == got.end(), "'", origin, "': tensors '", twice->second.stored, "' and '",
                  source.stored, "' are the same weight (", ours, ") stored twice: remove one");
  got.emplace(ours, std::move(source));
}

const HfSource* HfPlan::find(const std::string& ours) const {
  for (const auto& [name, source] : tensors)
    if (name == ours) return &source;
  return nullptr;
}

void fill_from_hf(const TensorSource& source, const HfPlan& plan, const std::string& ours,
                  const at::Tensor& dest) {
  const HfSource* s = plan.find(ours);
  DDP_CHECK(s != nullptr, "'", plan.origin, "' has no tensor for '", ours, "'");
  at::NoGradGuard no_grad;
  at::Tensor target = dest;
  const int64_t rows = s->shape.empty() ? 0 : s->shape[0];
  const bool fits = dest.dim() == static_cast<int64_t>(s->shape.size()) && dest.dim() >= 1 &&
                    (s->vocab_rows ? dest.size(0) >= rows : dest.size(0) == rows) &&
                    dest.sizes().slice(1) == at::IntArrayRef(s->shape).slice(1);
  DDP_USAGE_CHECK(fits || (dest.dim() == 0 && s->shape.empty()), "'", plan.origin, "': tensor '", s->stored,
                  "' gives ", ours, " the shape ", at::IntArrayRef(s->shape), ", but the model's is ",
                  dest.sizes(), ": build the model with the folder's sizes (its config.json)");
  if (s->vocab_rows && dest.size(0) > rows) {  // Note [Padded vocabulary]: the extra rows are zero
    dest.narrow(0, rows, dest.size(0) - rows).zero_();
    target = dest.narrow(0, 0, rows);
  }
  if (!s->transpose && target.is_cpu() && target.is_contiguous() && target.scalar_type() == s->dtype) {
    source.read_into(s->stored, target);  // straight into the parameter: no copy
  } else {
    const at::Tensor t = source.read(s->stored);
    target.copy_(s->transpose ? t.t() : t);
  }
  for (const HfTie& tie : plan.ties) {
    if (tie.ours != ours) continue;
    const at::Tensor other = source.read(tie.stored);
    DDP_USAGE_CHECK(other.sizes() == target.sizes() && other.to(target.options()).equal(target), "'",
                    plan.origin, "': ", tie.message);
  }
}

NamedTensors read_by_plan(const TensorSource& source, const HfPlan& plan) {
  NamedTensors out;
  for (const auto& [name, s] : plan.tensors) {
    out.emplace_back(name, at::empty(s.shape, at::kFloat));
    fill_from_hf(source, plan, name, out.back().second);
  }
  return out;
}

}  // namespace ddptrain
