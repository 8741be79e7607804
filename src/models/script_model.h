// ScriptModel: a TorchScript module saved by Python (torch.jit.script(model).save(path)),
// trained as a Model (#14). Its parameters and buffers are mirrored into a tree of plain
// torch::nn::Modules with the module's own names (conv.weight, blocks.0.norm.bias, ...): the
// same tensors, so DDP, the optimizer, checkpoints and to(device) see what the scripted code
// computes with, and model.pt has the keys of the Python module's state_dict. Its forward is
// the scripted forward; train()/eval() set the scripted module's mode too.
// Note [A buffer the scripted forward replaces]: a forward that assigns a buffer anew
// (self.ema = 0.9 * self.ema + ...) points the scripted module at another tensor, while the
// mirror, DDP's buffer broadcast and checkpoints hold the first: the ranks drifted apart and
// model.pt kept the initial value. After each forward the new value is copied into the held
// tensor and the module pointed back at it (PyTorch's DDP re-reads its buffers before each
// broadcast for the same case); one of another shape or dtype is a usage error naming it.
// A library user passes a module loaded (or built) in C++ the same way:
//   auto net = std::make_shared<ddptrain::ScriptModel>(torch::jit::load("net.pt"), "net.pt");
//   ddptrain::Trainer trainer(ctx, ddptrain::trainable(net), sgd, opts);
#pragma once

#include <string>

#include <torch/script.h>

#include "models/model.h"

namespace ddptrain {

class ScriptModel : public Model {
 public:
  /// Loads `path`; UsageError naming the file and the fix when it is missing, not a
  /// TorchScript archive (or one this LibTorch cannot read), or has no parameters.
  ScriptModel(const std::string& path, int64_t flops_per_sample = 0);
  /// A module already loaded; `name` is how messages and the log call it. UsageError when it
  /// has no parameters.
  ScriptModel(torch::jit::Module module, std::string name, int64_t flops_per_sample = 0);
  at::Tensor forward(const at::Tensor& x) override;
  int64_t train_flops_per_sample() const override { return flops_per_sample_; }
  std::string describe() const override;
  void train(bool on = true) override;

 private:
  void hold_replaced_buffers();
  torch::jit::Module module_;
  std::string name_;  // its file, or the library user's name for it
  int64_t flops_per_sample_;
};

}  // namespace ddptrain
