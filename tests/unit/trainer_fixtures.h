// The Trainer tests' user model, data, callbacks and runner: what a library user writes, and
// a world of ranks as threads of this process over real Gloo (test_trainer*.cpp).
#pragma once

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "dist_harness.h"
#include "models/script_model.h"
#include "optim/fused_optimizers.h"
#include "train/fault_hooks.h"
#include "train/trainer.h"
#include "util/error.h"

namespace ddptrain::trainer_test {

// How UserNet is built: the ZeRO stage 3 tests build it differently on some ranks.
struct UserNetShape {
  bool b_is_a_unit = false;                                  // b a unit too
  UnitBackward a_backward = UnitBackward::kReadsParameters;  // what a's backward reads
  int64_t hidden = 16;                                       // a's outputs, b's inputs
  UnitSink* sink = nullptr;  // units sharded as built (Note [Units sharded as built])
};

// Not MiniResNet, no BatchNorm: two linear layers. The first is a unit (Note [Units]): run
// through Units::run, so zero_stage 3 gathers it on its own; b is the root unit's. With a sink,
// unit a goes to it as soon as it is built, before b is drawn.
struct UserNet : torch::nn::Module {
  explicit UserNet(const UserNetShape& shape = {}) : units_(shape.sink) {
    a = register_module("a", torch::nn::Linear(8, shape.hidden));
    units_.add(a.ptr(), "a", shape.a_backward);
    b = register_module("b", torch::nn::Linear(shape.hidden, 4));
    if (shape.b_is_a_unit) units_.add(b.ptr(), "b");
    units_.clear_sink();
  }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor h = torch::tanh(units_.run(0, [&] { return a(x); }));
    return units_.size() > 1 ? units_.run(1, [&] { return b(h); }) : b(h);
  }
  Units& units() { return units_; }
  torch::nn::Linear a{nullptr}, b{nullptr};
  Units units_;
};

// A dataset of the user's: only size() and get(). Sample i is a pure function of i.
class UserData : public Dataset {
 public:
  UserData(int64_t n, bool regression) : n_(n), regression_(regression) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    const at::Tensor x = at::sin(at::arange(8, at::kFloat) * static_cast<double>(i + 1) * 0.37);
    if (regression_) return {x, at::stack({x.sum(), x.slice(0, 0, 4).prod(), x.max(), x.min()})};
    return {x, at::tensor(i % 4, at::kLong).reshape({})};
  }

 private:
  int64_t n_;
  bool regression_;
};

// The default generator is process-wide: ranks-as-threads must not draw from it at once.
inline std::shared_ptr<UserNet> make_net(const UserNetShape& shape = {}) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(5);
  return std::make_shared<UserNet>(shape);
}

inline TrainerOptions quiet_fp32(int batch_size, int epochs) {
  TrainerOptions o;
  o.data.batch_size = batch_size;
  o.loop.epochs = epochs;
  o.data.num_workers = 0;
  o.precision.use_amp = false;
  o.checkpoint.dir = "";  // no checkpoints
  o.loop.eval_every = 0;
  o.report.log_interval = 1000;
  o.ddp.bucket_cap_mb = 25;
  return o;
}

// quiet_fp32(8, 1) into `dir` for 4 steps, saving every 2: train_user_net at world 1 leaves
// step_00000002 and step_00000004 there.
inline TrainerOptions four_steps_saved_every_two(const std::string& dir) {
  TrainerOptions o = quiet_fp32(8, 1);
  o.checkpoint.dir = dir;
  o.checkpoint.save_every_steps = 2;
  o.loop.max_steps = 4;
  return o;
}

inline Objective mse() { return Objective::mean_squared_error(); }  // no `correct`: no accuracy

// UserNet as a TorchScript module built here (what torch.jit.script saves from Python), with
// the native module's weights: a library user's loaded script module (#14).
inline torch::jit::Module scripted(const UserNet& net) {
  auto linear = [](const torch::nn::Linear& l, const std::string& type) {
    torch::jit::Module m(type);
    m.register_parameter("weight", l->weight.detach().clone().requires_grad_(true), /*is_buffer=*/false);
    m.register_parameter("bias", l->bias.detach().clone().requires_grad_(true), /*is_buffer=*/false);
    m.define("def forward(self, x):\n    return torch.linear(x, self.weight, self.bias)\n");
    return m;
  };
  torch::jit::Module m("UserNet");
  m.register_module("a", linear(net.a, "LinearA"));
  m.register_module("b", linear(net.b, "LinearB"));
  m.define("def forward(self, x):\n    return self.b.forward(torch.tanh(self.a.forward(x)))\n");
  return m;
}

// How a test hands the user's module to the Trainer: as is, or scripted.
using AsTrainable = std::function<Trainable(const std::shared_ptr<UserNet>&)>;
inline Trainable native(const std::shared_ptr<UserNet>& net) { return trainable(net); }

// A callback of the user's that keeps state of its own in the checkpoints: a step counter.
struct Counter : Callback {
  void on_step_end(const TrainState&, const StepEvent&) override { counted[0].second += 1; }
  NamedTensors counted{{"steps", torch::zeros({1}, torch::kLong)}};
};

// A callback of the user's: the loss of every micro-batch and the steps it saw.
struct Recorder : Callback {
  void on_micro_batch(const TrainState&, const MicroBatchEvent& e) override {
    losses.push_back(e.loss.item<double>());
  }
  void on_step_end(const TrainState& s, const StepEvent&) override { steps.push_back(s.global_step); }
  std::vector<double> losses;
  std::vector<int64_t> steps;
};

struct Trained {
  std::vector<at::Tensor> params;  // rank 0's
  TrainResult result;
  std::vector<int64_t> steps;  // rank 0's callback
  int64_t counted = 0;         // rank 0's Counter, saved in the checkpoints as part "counter"
};

// fused: FusedSGD / FusedAdamW (optim/fused_optimizers.h) with the same options.
inline std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& net, bool adamw,
                                                               bool fused = false) {
  if (!adamw) {
    const auto o = torch::optim::SGDOptions(0.1).momentum(0.9);
    if (fused) return std::make_unique<FusedSGD>(net.parameters(), o);
    return std::make_unique<torch::optim::SGD>(net.parameters(), o);
  }
  std::vector<at::Tensor> decay, no_decay;  // two groups, as ddptrain's CLI builds AdamW
  for (const auto& p : net.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(0.01).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(0.01).weight_decay(0)));
  if (fused) return std::make_unique<FusedAdamW>(std::move(groups), torch::optim::AdamWOptions(0.01));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions(0.01));
}

inline Trained train_user_net(int world, TrainerOptions opts,
                              Objective objective = Objective::classification(), bool regression = false,
                              const AsTrainable& as = native, bool adamw = false,
                              const FaultPlan& faults = {}, bool fused = false, int64_t test_size = 40) {
  Trained out;
  std::mutex mu;
  testing_dist::run_world(world, [&](const DistContext& ctx) {
    Trainable model = as(make_net());
    const std::shared_ptr<torch::nn::Module> net = model.module;
    const auto optimizer = make_optimizer(*net, adamw, fused);
    UserData train(96, regression), test(test_size, regression);
    Trainer trainer(ctx, std::move(model), *optimizer, opts, objective);
    trainer.set_loop_hooks(std::make_shared<FaultHooks>(faults));
    auto recorder = std::make_shared<Recorder>();
    trainer.add_callback(recorder);
    auto counter = std::make_shared<Counter>();
    trainer.add_callback(counter);
    trainer.add_checkpoint_part(tensors_part("counter", counter->counted));
    const TrainResult r = trainer.fit(train, &test);
    std::lock_guard<std::mutex> lock(mu);
    if (ctx.rank() != 0) return;
    for (const auto& p : net->parameters()) out.params.push_back(p.detach().clone());
    out.result = r;
    out.steps = recorder->steps;
    out.counted = counter->counted[0].second.item<int64_t>();
  });
  return out;
}

inline double max_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

// A model of the test's own (Net) trained as a library user would: a fresh Net on every rank
// (seed 5, drawn one rank at a time, so every rank holds the same weights), the optimizer
// optimizer_for(net) makes, UserData(96) at `world`; after(ctx, net, result) runs on every rank
// once it has fitted, one rank at a time.
template <typename Net>
void fit_fresh_net(int world, const TrainerOptions& o,
                   const std::function<std::unique_ptr<torch::optim::Optimizer>(Net&)>& optimizer_for,
                   const std::function<void(const DistContext&, Net&, const TrainResult&)>& after) {
  std::mutex mu;
  testing_dist::run_world(world, [&](const DistContext& ctx) {
    std::shared_ptr<Net> net;
    {
      std::lock_guard<std::mutex> lock(mu);
      torch::manual_seed(5);
      net = std::make_shared<Net>();
    }
    const auto optimizer = optimizer_for(*net);
    UserData train(96, /*regression=*/false);
    Trainer trainer(ctx, trainable(net), *optimizer, o);
    const TrainResult r = trainer.fit(train, nullptr);
    std::lock_guard<std::mutex> lock(mu);
    after(ctx, *net, r);
  });
}

// fit_fresh_net's rank 0: its parameters after the fit, and its result.
struct NetFit {
  std::vector<at::Tensor> params;
  TrainResult result;
};
template <typename Net>
NetFit rank_zero_fit(int world, const TrainerOptions& o,
                     const std::function<std::unique_ptr<torch::optim::Optimizer>(Net&)>& optimizer_for) {
  NetFit out;
  fit_fresh_net<Net>(world, o, optimizer_for, [&](const DistContext& ctx, Net& net, const TrainResult& r) {
    if (ctx.rank() != 0) return;
    out.result = r;
    for (const auto& p : net.parameters()) out.params.push_back(p.detach().clone());
  });
  return out;
}

}  // namespace ddptrain::trainer_test
