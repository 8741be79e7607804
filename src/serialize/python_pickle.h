// Python-loadable state_dicts. Note [weights_only pickles]: torch::pickle_save tags dicts
// with torch.jit._pickle.restore_type_tag, which torch.load(weights_only=True) rejects. We
// pickle with tag_aggregates=false into the same zip container (PyTorchStreamWriter), which
// the safe unpickler accepts: a plain {str: Tensor} dict, keys in PyTorch state_dict order.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace ddptrain {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// The module's state in Python's state_dict order: per module, own parameters, own buffers,
/// then children, recursively.
NamedTensors state_dict(const torch::nn::Module& module);

/// Copies a state dict into the module; Error naming the key on a missing key, an unexpected
/// key or a shape mismatch.
void load_state_dict(torch::nn::Module& module, const NamedTensors& state, const std::string& origin);

/// Bytes of a torch.save-compatible zip holding a {str: Tensor} dict.
std::string pickle_tensors(const NamedTensors& tensors);

}  // namespace ddptrain
