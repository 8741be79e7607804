// Dynamic loss scaling for fp16 (PyTorch's torch.cuda.amp.GradScaler, same semantics and
// defaults): the loss is multiplied by a scale before backward so small fp16 gradients do
// not flush to zero; before the optimizer step the gradients are divided by it; a step
// whose gradients hold an inf or NaN is skipped and the scale backs off; after
// growth_interval finite steps in a row it grows (never to inf).
// Under DDP every rank sees the same averaged gradients (an inf or NaN on one rank reaches
// all through the all-reduce), so every rank skips the same steps without a collective.
// LibTorch 1.13 has no CPU kernels for the fused _amp_* ops: the CPU path is ours; CUDA
// uses the fused ops. Disabled (bf16, fp32): every call is a no-op and step() just steps.
#pragma once

#include <cstdint>
#include <functional>

#include <ATen/ATen.h>
#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include "dist/dist_context.h"

namespace ddptrain {

struct GradScalerOptions {
  bool enabled = false;
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

struct GradScalerState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;  // finite steps in a row since the last change
};

/// As saved in a checkpoint's meta.json ("grad_scaler": {"scale", "growth_tracker"}).
nlohmann::json to_json(const GradScalerState& s);
GradScalerState grad_scaler_state_from_json(const nlohmann::json& j);

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions opts);

  bool enabled() const { return opts_.enabled; }
  /// loss * scale (the loss itself when disabled).
  at::Tensor scale(const at::Tensor& loss);
  /// Divides the optimizer's gradients by the scale (once per step; later calls do nothing)
  /// and records whether any of them is inf or NaN. Call it before clipping.
  void unscale(torch::optim::Optimizer& optimizer);
  /// The same for these gradients (a rank's shards under --zero_stage 2).
  void unscale(std::vector<at::Tensor> grads);
  /// After unscale() of a rank's shards: inf/NaN found on any rank counts on every rank (a
  /// collective; nothing when disabled), so all skip the same steps.
  void agree(const DistContext& ctx);
  /// optimizer.step() (or step_fn, e.g. a sharded optimizer's step) unless a gradient was
  /// inf/NaN (unscaling first if needed); returns whether it stepped.
  bool step(torch::optim::Optimizer& optimizer, const std::function<void()>& step_fn = {});
  /// The scale for the next step: backoff after a skipped step, growth after growth_interval
  /// finite ones.
  void update();

  double current_scale() const;
  GradScalerState state() const;
  void load(const GradScalerState& s);

 private:
  GradScalerOptions opts_;
  at::Tensor scale_;           // float32, one element, on the gradients' device
  at::Tensor growth_tracker_;  // int32, one element
  at::Tensor found_inf_;       // float32, one element: > 0 when this step saw inf/NaN
  bool unscaled_ = false;
};

}  // namespace ddptrain
