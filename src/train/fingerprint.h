// Fingerprints of the training state: FNV-1a over the bytes of every parameter and buffer
// (equal on all ranks iff the replicas are bitwise identical; logged by every rank at the end
// so divergence is visible), and over the optimizer's state tensors in parameter order
// (resumed and uninterrupted runs must agree on optimizer state too).
#pragma once

#include <cstdint>
#include <string>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

namespace ddptrain {

uint64_t state_fingerprint(const torch::nn::Module& m);
uint64_t optimizer_fingerprint(torch::optim::Optimizer& opt);
/// 16 hex digits.
std::string hex_fingerprint(uint64_t v);

}  // namespace ddptrain
