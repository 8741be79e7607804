#include "train/grad_scaler.h"

#include <cmath>

#include "util/error.h"

namespace ddptrain {

GradScaler::GradScaler(GradScalerOptions opts) : opts_(opts) {
  DDP_USAGE_CHECK(opts_.init_scale > 0 && std::isfinite(opts_.init_scale), "the loss scaler's initial scale ",
                  opts_.init_scale, " must be a positive finite number");
  DDP_USAGE_CHECK(opts_.growth_factor > 1.0, "the loss scaler's growth factor ", opts_.growth_factor,
                  " must be > 1");
  DDP_USAGE_CHECK(opts_.backoff_factor > 0 && opts_.backoff_factor < 1.0, "the loss scaler's backoff factor ",
                  opts_.backoff_factor, " must be in (0, 1)");
  DDP_USAGE_CHECK(opts_.growth_interval >= 1, "the loss scaler's growth interval ", opts_.growth_interval,
                  " must be >= 1");
  scale_ = at::full({1}, opts_.init_scale, at::kFloat);
  growth_tracker_ = at::zeros({1}, at::kInt);
  found_inf_ = at::zeros({1}, at::kFloat);
}

at::Tensor GradScaler::scale(const at::Tensor& loss) {
  if (!opts_.enabled) return loss;
  if (scale_.device() != loss.device()) {
    scale_ = scale_.to(loss.device());
    growth_tracker_ = growth_tracker_.to(loss.device());
    found_inf_ = found_inf_.to(loss.device());
  }
  // In the promoted dtype, as PyTorch's `outputs * self._scale` (an fp32 tensor of shape (1)):
  // an fp16 loss is scaled in fp32, never to inf by 65536; an fp32 loss as before.
  const at::ScalarType dtype = at::promote_types(loss.scalar_type(), scale_.scalar_type());
  return loss.to(dtype) * scale_.to(dtype);
}

void GradScaler::unscale(torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> grads;
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params())
      if (p.grad().defined()) grads.push_back(p.mutable_grad());
  unscale(std::move(grads));
}

void GradScaler::agree(const DistContext& ctx) {
  if (!opts_.enabled) return;
  std::vector<at::Tensor> f{found_inf_};
  ctx.all_reduce_sum(f, "loss scaler: inf/NaN found on any rank's gradient shard");
}

void GradScaler::unscale(std::vector<at::Tensor> grads) {
  if (!opts_.enabled || unscaled_) return;
  unscaled_ = true;
  // PyTorch: inv_scale = scale.double().reciprocal().float().
  const at::Tensor inv_scale = scale_.to(at::kDouble).reciprocal().to(at::kFloat);
  found_inf_.zero_();
  if (scale_.is_cuda()) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf_, inv_scale);
    return;
  }
  // CPU: the same arithmetic as the fused kernel (check, then multiply every gradient).
  const float inv = inv_scale.item<float>();
  bool non_finite = false;
  for (auto& g : grads) {
    non_finite = non_finite || !g.isfinite().all().item<bool>();
    g.mul_(inv);
  }
  found_inf_.fill_(non_finite ? 1.0 : 0.0);
}

bool GradScaler::step(torch::optim::Optimizer& optimizer, const std::function<void()>& step_fn) {
  const auto do_step = [&] { step_fn ? step_fn() : static_cast<void>(optimizer.step()); };
  if (!opts_.enabled) {
    do_step();
    return true;
  }
  unscale(optimizer);
  const bool finite = found_inf_.item<float>() == 0.0f;
  if (finite) do_step();
  return finite;
}

void GradScaler::update() {
  if (!opts_.enabled) return;
  if (scale_.is_cuda()) {
    at::_amp_update_scale_(scale_, growth_tracker_, found_inf_, opts_.growth_factor, opts_.backoff_factor,
                           opts_.growth_interval);
  } else {
    // PyTorch's _amp_update_scale_ (the CUDA kernel's arithmetic): float scale, double factors.
    float s = scale_.item<float>();
    int32_t tracker = growth_tracker_.item<int32_t>();
    if (found_inf_.item<float>() > 0) {
      s = static_cast<float>(s * opts_.backoff_factor);
      tracker = 0;
    } else if (tracker + 1 == opts_.growth_interval) {
      const float grown = static_cast<float>(s * opts_.growth_factor);
      if (std::isfinite(grown)) s = grown;  // never grows to inf
      tracker = 0;
    } else {
      tracker += 1;
    }
    scale_.fill_(s);
    growth_tracker_.fill_(tracker);
  }
  found_inf_.zero_();
  unscaled_ = false;
}

double GradScaler::current_scale() const { return opts_.enabled ? scale_.item<float>() : 1.0; }

GradScalerState GradScaler::state() const {
  return {scale_.item<float>(), static_cast<int64_t>(growth_tracker_.item<int32_t>())};
}

void GradScaler::load(const GradScalerState& s) {
  scale_.fill_(s.scale);
  // A resume with a shorter growth interval than the checkpoint's count: the scale grows at the
  // next finite step. Left as it was, the count would pass the interval, which growth must meet
  // exactly, and the scale never grew again until an overflow.
  const int64_t tracker =
      std::min<int64_t>(s.growth_tracker, std::max<int64_t>(opts_.growth_interval - 1, 0));
  growth_tracker_.fill_(static_cast<int32_t>(tracker));
}

nlohmann::json to_json(const GradScalerState& s) {
  return {{"scale", s.scale}, {"growth_tracker", s.growth_tracker}};
}

GradScalerState grad_scaler_state_from_json(const nlohmann::json& j) {
  return {j.at("scale").get<double>(), j.at("growth_tracker").get<int64_t>()};
}

}  // namespace ddptrain
