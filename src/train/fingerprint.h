// Fingerprints of the training state: FNV-1a over the bytes of every parameter and buffer
// (equal on all ranks iff the replicas are bitwise identical; logged by every rank at the end
// so divergence is visible), and over the optimizer's state tensors in parameter order
// (resumed and uninterrupted runs must agree on optimizer state too): one hash per parameter
// (over its state tensors), folded in parameter order, so that a sharded optimizer computes the
// same value a bucket at a time without holding the whole state (Note [Optimizer shard files]).
#pragma once

#include <cstdint>
#include <string>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

namespace ddptrain {

class ShardedOptimizer;

uint64_t state_fingerprint(const torch::nn::Module& m);
uint64_t optimizer_fingerprint(torch::optim::Optimizer& opt);
/// The same for ZeRO's sharded optimizer (a collective).
uint64_t optimizer_fingerprint(ShardedOptimizer& sharded, const torch::optim::Optimizer& full);
/// 16 hex digits.
std::string hex_fingerprint(uint64_t v);

}  // namespace ddptrain
