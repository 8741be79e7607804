// GPT's LayerNorm: ATen's (through the module), or layer_norm_to writing the autocast dtype
// (Note [LayerNorm into the autocast dtype], kernels/fused_layer_norm.h) as --fused_norm says.
#pragma once

#include <ATen/ATen.h>
#include <torch/nn/modules/normalization.h>

#include "models/model_options.h"

namespace ddptrain {

/// `ln` applied to `x`: fused under `mode` kOn, or kAuto on CUDA under autocast where the
/// kernels take the rows; else the module's own forward.
at::Tensor layer_norm(const torch::nn::LayerNorm& ln, const at::Tensor& x, FusedNorm mode);

}  // namespace ddptrain
