// One training step of a token model under bf16 CPU autocast, for tests that compare two
// settings of a model (a fused path against ATen's) bitwise: the loss and every gradient.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/functional/loss.h>

#include "models/model.h"
#include "util/torch_compat.h"

namespace bf16_step {

struct StepResult {
  at::Tensor loss;
  std::vector<at::Tensor> grads;  // every parameter's, in the model's order
};

/// `forward(inputs)` -> logits (B, T, vocab) under bf16 autocast, the cross-entropy against the
/// next tokens in fp32, one backward. tokens: (B, T + 1).
template <typename Forward>
StepResult bf16_step(ddptrain::Model& model, const at::Tensor& tokens, int64_t vocab, Forward&& forward) {
  const int64_t T = tokens.size(1) - 1;
  StepResult r;
  {
    ddptrain::compat::AutocastGuard autocast(at::kCPU, at::kBFloat16, true);
    const at::Tensor logits = forward(tokens.narrow(1, 0, T));
    r.loss = torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}).to(at::kFloat),
                                                  tokens.narrow(1, 1, T).reshape({-1}));
  }
  r.loss.backward();
  r.loss = r.loss.detach();
  for (const auto& p : model.parameters()) r.grads.push_back(p.grad().clone());
  return r;
}

/// The two steps' losses and gradients are bitwise equal.
inline void expect_bitwise_equal(const StepResult& a, const StepResult& b) {
  EXPECT_TRUE(at::equal(a.loss, b.loss)) << a.loss.item<double>() << " vs " << b.loss.item<double>();
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i)
    EXPECT_TRUE(at::equal(a.grads[i], b.grads[i])) << "parameter " << i;
}

}  // namespace bf16_step
