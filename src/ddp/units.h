// Note [Units]: full sharding (--zero_stage 3, ddp/fully_sharded.h) must act just before a
// part of a model runs (gather its parameters) and just after (free them, and hook its
// output, or each of its outputs, so they are gathered again before its backward). PyTorch has
// module forward hooks for this; LibTorch's modules do not (forward is not virtual). So a model
// names its units (GPT: each transformer block; MiniResNet: each residual block; a user's
// module: whatever it adds) and runs each through Units::run. Without hooks run() is just the
// call, so a model stays plain LibTorch and knows nothing of who shards it; the parameters
// outside every unit form the root unit, which the sharder handles around the whole forward.
// Units must run in the order they were added, each at most once per forward. A unit whose
// backward reads none of its parameters (an embedding lookup: its gradient needs the indices
// and the output's gradient only) says so when added, and is not gathered again for it.
//
// Note [Units sharded as built]
// Under --zero_stage 3 a rank keeps 1/W of each unit, so building the whole model first (and
// sharding it after) needs the whole model in memory once on every rank. A model's
// constructor may instead take a UnitSink and hand it to Model, which gives it to Units: each
// add() then passes the unit, built and initialised, to the sink at once, before the next unit
// draws its weights. ZeRO-3's sink (ddp/shard_as_built.h) fills it from a file when asked,
// broadcasts rank 0's values, keeps this rank's shard (set_built_shard) and frees the rest; the
// random draws are the whole build's, in the same order, so the weights are the same. The
// parameters of such a unit hold no memory until FullyShardedParams gathers them: nothing may
// read them before (the builder refuses what would, e.g. a forward to check the output).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

namespace ddptrain {

/// What a sharder does around each unit's forward (ddp/fully_sharded.h implements it).
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual void before_forward(size_t unit) = 0;
  /// The unit ran and gave `outputs` (one tensor, or two: run_pair).
  virtual void after_forward(size_t unit, const std::vector<at::Tensor>& outputs) = 0;
};

class Units;

/// Who wants each unit as soon as it is built (Note [Units sharded as built]).
class UnitSink {
 public:
  virtual ~UnitSink() = default;
  /// Unit `unit` of `units` is built and initialised; `name` is its path in the model ("h.3").
  virtual void built(Units& units, size_t unit, const std::string& name) = 0;
};

/// A unit sharded as it was built: its trainable parameters in the order of its flat buffer
/// (views into `flat`, whose storage is released), and this rank's persistent shard of it.
struct BuiltShard {
  std::vector<at::Tensor> params;
  at::Tensor flat;
  at::Tensor shard;
};

/// What a unit's backward reads of its own parameters (Note [Units]).
enum class UnitBackward { kReadsParameters, kReadsNoParameters };

class Units {
 public:
  explicit Units(UnitSink* sink = nullptr) : sink_(sink) {}

  /// Names `module` (a submodule of the model, at `name` in it) the next unit; returns its
  /// index. A sink, if set, gets it now.
  size_t add(std::shared_ptr<torch::nn::Module> module, const std::string& name = "",
             UnitBackward backward = UnitBackward::kReadsParameters) {
    modules_.push_back(std::move(module));
    backward_.push_back(backward);
    names_.push_back(name.empty() ? "unit " + std::to_string(modules_.size() - 1) : name);
    if (sink_) sink_->built(*this, modules_.size() - 1, names_.back());
    return modules_.size() - 1;
  }
  const std::vector<std::shared_ptr<torch::nn::Module>>& modules() const { return modules_; }
  const std::string& name(size_t unit) const { return names_.at(unit); }
  bool backward_reads_parameters(size_t unit) const {
    return backward_.at(unit) == UnitBackward::kReadsParameters;
  }
  size_t size() const { return modules_.size(); }
  /// The builder's: no sink once the model is built.
  void clear_sink() { sink_ = nullptr; }

  void set_built_shard(size_t unit, BuiltShard s) {
    if (built_.size() <= unit) built_.resize(unit + 1);
    built_[unit] = std::move(s);
  }
  /// The unit's shard when it was sharded as built; null otherwise.
  const BuiltShard* built_shard(size_t unit) const {
    return unit < built_.size() && built_[unit].flat.defined() ? &built_[unit] : nullptr;
  }
  bool any_built_shard() const {
    for (size_t u = 0; u < built_.size(); ++u)
      if (built_shard(u)) return true;
    return false;
  }
  /// FullyShardedParams took the shards over.
  void clear_built_shards() { built_.clear(); }

  /// forward() of unit `unit`, between the hooks when a sharder set them.
  at::Tensor run(size_t unit, const std::function<at::Tensor()>& forward) const {
    if (!hooks_) return forward();
    hooks_->before_forward(unit);
    at::Tensor out = forward();
    hooks_->after_forward(unit, {out});
    return out;
  }
  /// The same for a unit whose output is two tensors (a block's residual stream with its last
  /// add left to the next norm: Note [Residual add in the next norm], models/residual.h).
  std::pair<at::Tensor, at::Tensor> run_pair(
      size_t unit, const std::function<std::pair<at::Tensor, at::Tensor>()>& forward) const {
    if (!hooks_) return forward();
    hooks_->before_forward(unit);
    std::pair<at::Tensor, at::Tensor> out = forward();
    hooks_->after_forward(unit, {out.first, out.second});
    return out;
  }
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks; }

 private:
  std::vector<std::shared_ptr<torch::nn::Module>> modules_;
  std::vector<std::string> names_;
  std::vector<UnitBackward> backward_;
  UnitSink* sink_;
  std::vector<BuiltShard> built_;
  UnitHooks* hooks_ = nullptr;
};

}  // namespace ddptrain
