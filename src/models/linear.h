// Note [Linear through ATen]
// The language models apply their torch::nn::Linear layers with `linear(layer, x)` (below),
// not the module's forward. LibTorch's C++ module calls torch::nn::functional::linear, which
// for an input of more than two dimensions computes matmul and then `output += bias`: a
// separate broadcast add over the whole output (under bf16 autocast an fp32 bias added into
// bf16 through ATen's generic, unvectorised kernel). ATen's at::linear, which Python's
// nn.Linear calls, folds a contiguous (B, T, C) input into one addmm with the bias in the
// GEMM's epilogue (cuBLASLt on CUDA) and, under autocast, casts the bias with the other
// operands. The GPU check of 2026-12-04 (GPT-2 124M, bf16, batch 64 x 1024, one H200) measured
// the adds at 23.8 ms of a 166 ms step. The same arithmetic as Python's nn.Linear, so
// the models also compute what transformers and the Python references compute.
//
// Layers that read the same input (Llama's q/k/v projections, its gate and up projections) run
// as one GEMM over their weights stacked (linear_stacked): one launch and one larger GEMM, and
// the input has one consumer, so its gradient arrives whole from one GEMM instead of summed
// from several in the dtype they were computed in (bf16 under autocast where the input is
// bf16, as a fused norm's output is: Note [LayerNorm into the autocast dtype]).
#pragma once

#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include "util/error.h"

namespace ddptrain {

/// `layer` applied to `x` through at::linear (bias in the GEMM; see the Note).
inline at::Tensor linear(const torch::nn::Linear& layer, const at::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias.defined() ? layer->bias : at::Tensor());
}

/// `layers` applied to the same `x` as one GEMM (see the Note): their outputs side by side in
/// the last dimension, in the order given. The layers have biases all or none.
inline at::Tensor linear_stacked(const std::vector<torch::nn::Linear>& layers, const at::Tensor& x) {
  std::vector<at::Tensor> weights, biases;
  for (const auto& l : layers) {
    weights.push_back(l->weight);
    if (l->bias.defined()) biases.push_back(l->bias);
  }
  DDP_CHECK(biases.empty() || biases.size() == layers.size(), "linear_stacked: ", biases.size(), " of ",
            layers.size(), " layers have a bias (all or none)");
  return at::linear(x, at::cat(weights), biases.empty() ? at::Tensor() : at::cat(biases));
}

}  // namespace ddptrain
