// Note [Each module keeps its mode]
// A program that keeps a submodule in eval mode while the rest trains (a frozen backbone whose
// BatchNorm statistics and dropout must not change: the usual fine-tuning) calls eval() on it.
// LibTorch's Module::train() and eval() set every descendant, so a Trainer that called
// model->train() at each epoch and after each evaluation put that backbone back into training
// mode, silently: its BatchNorm normalised with batch statistics and updated its running ones.
// So evaluation and the objective check put each module back into the mode it had, and each
// epoch starts with the modes the model had when fit() began (a model wholly in eval mode then
// is put into training mode first). A TorchScript model is one module here: its scripted
// submodules take the mode the whole takes.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

namespace ddptrain {

class TrainingModes {
 public:
  /// Each module's mode now: the root's and every descendant's.
  explicit TrainingModes(torch::nn::Module& root) {
    for (const auto& m : root.modules(/*include_self=*/true)) modes_.emplace_back(m, m->is_training());
  }
  /// Each module back in the mode it had. Parents first (modules() lists them so): a parent's
  /// train() sets its descendants, whose own modes follow.
  void restore() const {
    for (const auto& [module, training] : modes_) module->train(training);
  }

 private:
  std::vector<std::pair<std::shared_ptr<torch::nn::Module>, bool>>
      modes_;  // held: a callback may replace one
};

/// The modes fit() trains with: the model's own, after putting a model wholly in eval mode into
/// training mode.
inline TrainingModes modes_to_train_in(torch::nn::Module& root) {
  if (!root.is_training()) root.train();
  return TrainingModes(root);
}

}  // namespace ddptrain
