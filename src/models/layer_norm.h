// GPT's LayerNorm: ATen's (through the module), or layer_norm_to writing the autocast dtype
// (Note [LayerNorm into the autocast dtype], kernels/fused_layer_norm.h) as --fused_norm says;
// Llama's RMSNorm asks the same question (fused_norm_output).
#pragma once

#include <optional>
#include <utility>

#include <ATen/ATen.h>
#include <torch/nn/modules/normalization.h>

#include "models/model_options.h"

namespace ddptrain {

/// The dtype a fused norm of `x` writes under `mode` (the autocast dtype, fp32 without
/// autocast): kOn for any fp32 x, kAuto for fp32 CUDA rows the kernels take under autocast;
/// nullopt where the module's own forward runs.
std::optional<at::ScalarType> fused_norm_output(const at::Tensor& x, FusedNorm mode);

/// {h = x + branch, ln(h)}: in one pass each way where `ln` would be fused (add_layer_norm_to),
/// else the add and layer_norm(ln, h, mode). An undefined branch: {x, layer_norm(ln, x, mode)}.
std::pair<at::Tensor, at::Tensor> add_layer_norm(const torch::nn::LayerNorm& ln, const at::Tensor& x,
                                                 const at::Tensor& branch, FusedNorm mode);

/// `ln` applied to `x`: fused under `mode` kOn, or kAuto on CUDA under autocast where the
/// kernels take the rows; else the module's own forward.
at::Tensor layer_norm(const torch::nn::LayerNorm& ln, const at::Tensor& x, FusedNorm mode);

}  // namespace ddptrain
