// Note [Units]: full sharding (--zero_stage 3, ddp/fully_sharded.h) must act just before a
// part of a model runs (gather its parameters) and just after (free them, and hook its
// output so they are gathered again before its backward). PyTorch has module forward hooks
// for this; LibTorch's modules do not (forward is not virtual). So a model names its units
// (GPT: each transformer block; MiniResNet: each residual block; a user's module: whatever
// it adds) and runs each through Units::run. Without hooks run() is just the call, so a
// model stays plain LibTorch and knows nothing of who shards it; the parameters outside
// every unit form the root unit, which the sharder handles around the whole forward.
// Units must run in the order they were added, each at most once per forward.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace ddptrain {

/// What a sharder does around each unit's forward (ddp/fully_sharded.h implements it).
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(size_t unit) = 0;
  /// Returns the output the model continues with (the same values).
  virtual at::Tensor after_forward(size_t unit, const at::Tensor& output) = 0;
};

class Units {
 public:
  /// Names `module` (a submodule of the model) the next unit; returns its index.
  size_t add(std::shared_ptr<torch::nn::Module> module) {
    modules_.push_back(std::move(module));
    return modules_.size() - 1;
  }
  const std::vector<std::shared_ptr<torch::nn::Module>>& modules() const { return modules_; }
  size_t size() const { return modules_.size(); }

  /// forward() of unit `unit`, between the hooks when a sharder set them.
  at::Tensor run(size_t unit, const std::function<at::Tensor()>& forward) const {
    if (!hooks_) return forward();
    hooks_->before_forward(unit);
    return hooks_->after_forward(unit, forward());
  }
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks; }

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> modules_;
  UnitHooks* hooks_ = nullptr;
};

}  // namespace ddptrain
