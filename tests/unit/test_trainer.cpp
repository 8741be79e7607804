// The Trainer as a library user calls it: a module, a dataset and a loss of the user's own,
// ranks as threads of this process over real Gloo (#13: world 2 equals world 1 with the
// doubled batch; a user's loss; callbacks; checkpoints and exact resume in process).
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <mutex>

#include <unistd.h>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "dist_harness.h"
#include "models/script_model.h"
#include "train/fault_hooks.h"
#include "train/trainer.h"
#include "util/error.h"

using namespace ddptrain;

namespace {

// Not MiniResNet, no BatchNorm: two linear layers. The first is a unit (Note [Units]): run
// through Units::run, so zero_stage 3 gathers it on its own; b is the root unit's.
struct UserNet : torch::nn::Module {
  UserNet() {
    a = register_module("a", torch::nn::Linear(8, 16));
    b = register_module("b", torch::nn::Linear(16, 4));
    units_.add(a.ptr());
  }
  at::Tensor forward(const at::Tensor& x) {
    return b(torch::tanh(units_.run(0, [&] { return a(x); })));
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
std::shared_ptr<UserNet> make_net() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  torch::manual_seed(5);
  return std::make_shared<UserNet>();
}

TrainerOptions quiet_fp32(int batch_size, int epochs) {
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

Objective mse() { return Objective::mean_squared_error(); }  // no `correct`: no accuracy

// UserNet as a TorchScript module built here (what torch.jit.script saves from Python), with
// the native module's weights: a library user's loaded script module (#14).
torch::jit::Module scripted(const UserNet& net) {
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
Trainable native(const std::shared_ptr<UserNet>& net) { return trainable(net); }

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

std::unique_ptr<torch::optim::Optimizer> make_optimizer(torch::nn::Module& net, bool adamw) {
  if (!adamw)
    return std::make_unique<torch::optim::SGD>(net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  std::vector<at::Tensor> decay, no_decay;  // two groups, as ddptrain's CLI builds AdamW
  for (const auto& p : net.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(0.01).weight_decay(0.1)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(0.01).weight_decay(0)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions(0.01));
}

Trained train_user_net(int world, TrainerOptions opts, Objective objective = Objective::classification(),
                       bool regression = false, const AsTrainable& as = native, bool adamw = false,
                       const FaultPlan& faults = {}) {
  Trained out;
  std::mutex mu;
  testing_dist::run_world(world, [&](const DistContext& ctx) {
    Trainable model = as(make_net());
    const std::shared_ptr<torch::nn::Module> net = model.module;
    const auto optimizer = make_optimizer(*net, adamw);
    UserData train(96, regression), test(40, regression);
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

double max_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

}  // namespace

TEST(Trainer, UserModuleAtWorldTwoEqualsWorldOneWithTheDoubledBatch) {
  for (int accum : {1, 2}) {
    TrainerOptions one = quiet_fp32(16 / accum, 2), two = quiet_fp32(8 / accum, 2);
    one.loop.grad_accum_steps = two.loop.grad_accum_steps = accum;
    const Trained w1 = train_user_net(1, one), w2 = train_user_net(2, two);
    ASSERT_EQ(w1.params.size(), 4u);
    EXPECT_EQ(w1.result.global_step, 12);  // 96 samples / 16 per step, 2 epochs
    EXPECT_EQ(w2.result.global_step, 12);
    const Trained start = train_user_net(1, quiet_fp32(16, 0));  // no epoch: the initial weights
    EXPECT_GT(max_diff(w1.params, start.params), 1e-3) << "training changed nothing";
    EXPECT_LE(max_diff(w1.params, w2.params), 1e-6) << "grad_accum_steps " << accum;
  }
}

TEST(Trainer, AUserLossCallbacksAndEvaluationWithoutAccuracy) {
  TrainerOptions o = quiet_fp32(8, 2);
  o.loop.eval_every = 1;
  const Trained r = train_user_net(2, o, mse(), /*regression=*/true);
  EXPECT_EQ(r.steps.size(), 12u);
  EXPECT_EQ(r.steps.front(), 1);
  EXPECT_EQ(r.steps.back(), 12);
  EXPECT_TRUE(r.result.evaluated);
  EXPECT_EQ(r.result.test_accuracy, -1.0) << "an objective without `correct` reports no accuracy";
  EXPECT_GT(r.result.test_loss, 0.0);
  EXPECT_LT(r.result.train_loss, 10.0);
}

TEST(Trainer, ResumeInProcessEndsBitwiseEqualToAnUninterruptedRun) {
  const std::string dir = testing_dist::temp_dir("trainer_resume");
  TrainerOptions o = quiet_fp32(8, 2);
  o.optim.lr_schedule = LrSchedule::kEpochCosine;
  o.checkpoint.dir = dir + "/whole";
  const Trained whole = train_user_net(2, o, mse(), true);
  o.checkpoint.dir = dir + "/parts";
  o.loop.max_steps = 4;  // stops mid-epoch 1 (6 steps per epoch): a mid-epoch checkpoint
  const Trained first = train_user_net(2, o, mse(), true);
  ASSERT_FALSE(first.result.last_checkpoint.empty());
  EXPECT_EQ(first.result.global_step, 4);
  o.loop.max_steps = 0;
  o.checkpoint.resume_from = first.result.last_checkpoint;
  const Trained resumed = train_user_net(2, o, mse(), true);
  EXPECT_EQ(resumed.steps.front(), 5) << "the resumed run continues the step count";
  EXPECT_EQ(resumed.result.global_step, 12);
  EXPECT_EQ(resumed.result.fingerprint, whole.result.fingerprint);
  EXPECT_EQ(whole.counted, 12);
  EXPECT_EQ(resumed.counted, 12) << "the user's part came back with the checkpoint (4) and counted on";
  EXPECT_EQ(max_diff(resumed.params, whole.params), 0.0);
  std::filesystem::remove_all(dir);
}

// A TorchScript module loaded in C++ trains through ScriptModel as the native module does,
// from memory and from its saved file.
TEST(Trainer, AScriptModuleTrainsAsTheNativeModule) {
  const std::string dir = testing_dist::temp_dir("trainer_script");
  std::filesystem::create_directories(dir);
  std::mutex mu;  // the ranks are threads: the file is written once
  auto from_memory = [&](const std::shared_ptr<UserNet>& net) {
    auto model = std::make_shared<ScriptModel>(scripted(*net), "user_net");
    std::lock_guard<std::mutex> lock(mu);
    if (!std::filesystem::exists(dir + "/user_net.pt")) scripted(*net).save(dir + "/user_net.pt");
    return trainable(model);
  };
  auto from_file = [&](const std::shared_ptr<UserNet>&) {
    return trainable(std::make_shared<ScriptModel>(dir + "/user_net.pt"));
  };
  TrainerOptions o = quiet_fp32(8, 2);
  const Trained ours = train_user_net(2, o, mse(), true),
                script = train_user_net(2, o, mse(), true, from_memory);
  ASSERT_EQ(script.params.size(), 4u);
  EXPECT_EQ(script.result.global_step, 12);
  EXPECT_LE(max_diff(ours.params, script.params), 1e-6);
  std::printf("scripted vs native after 12 steps at world 2: max |diff| %g\n",
              max_diff(ours.params, script.params));
  const Trained loaded = train_user_net(2, o, mse(), true, from_file);
  EXPECT_EQ(max_diff(loaded.params, script.params), 0.0) << "the saved file trains as the module in memory";
  const Trained start = train_user_net(1, quiet_fp32(8, 0), mse(), true, from_file);
  EXPECT_GT(max_diff(start.params, script.params), 1e-3) << "training changed nothing";
  std::filesystem::remove_all(dir);
}

// Notes [ZeRO stage 1] and [ZeRO stage 2]: sharding the optimizer's state, and the gradients,
// trains as DDP does, with SGD and AdamW (two groups: decay and none), at world 2 and 4.
TEST(Trainer, ZeroStagesTrainAsStageZero) {
  for (bool adamw : {false, true})
    for (int world : {2, 4}) {
      TrainerOptions o = quiet_fp32(8, 2);
      o.loop.eval_every = 1;  // stage 3 evaluates with its units gathered one at a time
      const Trained zero = train_user_net(world, o, mse(), true, native, adamw);
      ASSERT_TRUE(zero.result.evaluated);
      for (int stage : {1, 2, 3}) {
        o.zero.stage = stage;
        const Trained z = train_user_net(world, o, mse(), true, native, adamw);
        const double diff = max_diff(zero.params, z.params);
        std::printf("%s world %d: stage %d vs stage 0 max |weight diff| %g, optimizer state %s\n",
                    adamw ? "adamw" : "sgd", world, stage, diff,
                    zero.result.optimizer_fingerprint == z.result.optimizer_fingerprint ? "bitwise equal"
                                                                                        : "differs");
        EXPECT_LE(diff, 1e-6) << (adamw ? "adamw" : "sgd") << " world " << world << " stage " << stage;
        EXPECT_EQ(z.result.global_step, zero.result.global_step);
        EXPECT_TRUE(z.result.evaluated);
        EXPECT_NEAR(z.result.test_loss, zero.result.test_loss, 1e-6) << "stage " << stage;
        EXPECT_NE(z.result.optimizer_fingerprint,
                  train_user_net(world, quiet_fp32(8, 0)).result.optimizer_fingerprint)
            << "the gathered state is empty";
      }
    }
}

// Stages 2 and 3 with what needs the whole gradient: accumulation (no_sync), clipping (the norm
// from the shards), the loss scaler (unscaled shards, the inf flag agreed; a NaN loss on one
// rank skips the step on every rank) and bf16 autocast, as stage 0.
TEST(Trainer, ZeroStagesTwoAndThreeWithAccumulationClippingTheScalerAndBf16) {
  TrainerOptions o = quiet_fp32(4, 2);
  o.loop.grad_accum_steps = 2;
  o.optim.clip_grad_norm = 0.05;  // small enough to clip every step
  o.precision.grad_scaler = ScalerMode::kOn;
  o.precision.scaler_init_scale = 256;
  FaultPlan nan;
  nan.nan_at_step = 3;  // rank 1's loss is NaN in step 3
  nan.rank = 1;
  const Trained zero = train_user_net(2, o, mse(), true, native, true, nan);
  EXPECT_GT(max_diff(zero.params, train_user_net(2, o, mse(), true, native, true).params), 0.0)
      << "the NaN step was not skipped";
  TrainerOptions bf16 = quiet_fp32(4, 2);
  bf16.precision.amp_dtype = AmpDtype::kBf16;
  bf16.precision.use_amp = true;
  bf16.precision.grad_scaler = ScalerMode::kOff;
  const Trained zero_bf16 = train_user_net(2, bf16, mse(), true, native, true);
  const Trained fp32 = train_user_net(2, quiet_fp32(4, 2), mse(), true, native, true);
  EXPECT_GT(max_diff(zero_bf16.params, fp32.params), 1e-6) << "bf16 autocast changed nothing: was it on?";
  // Stage 1 has the whole gradient (all-reduced as stage 0): bitwise, clipping included. Stages
  // 2 and 3 sum the clipping norm from the shards, in another order: within 1e-6 (docs/precision-memory.md).
  TrainerOptions one = o;
  one.zero.stage = 1;
  EXPECT_EQ(max_diff(zero.params, train_user_net(2, one, mse(), true, native, true, nan).params), 0.0)
      << "stage 1";
  for (int stage : {2, 3}) {
    o.zero.stage = stage;
    const Trained z = train_user_net(2, o, mse(), true, native, true, nan);
    const double diff = max_diff(zero.params, z.params);
    std::printf(
        "accumulation 2, clipping 0.05, scaler on, a NaN on rank 1: stage %d vs stage 0 max |weight diff| "
        "%g\n",
        stage, diff);
    EXPECT_LE(diff, 1e-6) << "stage " << stage;
    EXPECT_EQ(z.result.global_step, zero.result.global_step);
    EXPECT_EQ(z.steps.size(), zero.steps.size());
    EXPECT_GT(max_diff(z.params, train_user_net(2, quiet_fp32(4, 0), mse(), true).params), 1e-3)
        << "nothing trained";
    // bf16 autocast: the shards step the same fp32 master weights.
    bf16.zero.stage = stage;
    const Trained z_bf16 = train_user_net(2, bf16, mse(), true, native, true);
    std::printf("bf16 autocast: stage %d vs stage 0 max |weight diff| %g\n", stage,
                max_diff(zero_bf16.params, z_bf16.params));
    EXPECT_LE(max_diff(zero_bf16.params, z_bf16.params), 1e-6) << "stage " << stage;
  }
}

// A stage-1, -2 or -3 checkpoint taken mid-epoch resumes at stages 3, 2, 1 and 0, each bitwise
// equal to the uninterrupted run (the checkpoint holds the gathered, stage-0 format state).
TEST(Trainer, ZeroCheckpointsResumeAtAnyStage) {
  const std::string dir = testing_dist::temp_dir("trainer_zero");
  for (int written : {1, 2, 3})
    for (bool adamw : {false, true}) {
      TrainerOptions o = quiet_fp32(8, 2);
      o.optim.lr_schedule = LrSchedule::kEpochCosine;
      o.zero.stage = written;
      o.checkpoint.dir = dir + "/whole";
      const Trained whole = train_user_net(2, o, mse(), true, native, adamw);
      o.checkpoint.dir = dir + "/parts";
      o.loop.max_steps = 4;
      const Trained first = train_user_net(2, o, mse(), true, native, adamw);
      ASSERT_FALSE(first.result.last_checkpoint.empty());
      o.loop.max_steps = 0;
      o.checkpoint.resume_from = first.result.last_checkpoint;
      for (int stage : {3, 2, 1, 0}) {
        o.zero.stage = stage;
        const Trained resumed = train_user_net(2, o, mse(), true, native, adamw);
        EXPECT_EQ(resumed.result.global_step, 12);
        EXPECT_EQ(max_diff(resumed.params, whole.params), 0.0)
            << "written at stage " << written << ", resumed at stage " << stage
            << (adamw ? " adamw" : " sgd");
        EXPECT_EQ(resumed.result.optimizer_fingerprint, whole.result.optimizer_fingerprint)
            << "stage " << stage;
      }
      std::filesystem::remove_all(dir);
    }
}

// Reshard (Note [Resume at another world size]): a stage-1 (and a stage-3) checkpoint written at
// world 2 resumes at world 4 and at world 1, at stages 1, 3 and 0, with the optimizer state
// equal to the gathered original (fingerprints of the full state), and trains on from there.
TEST(Trainer, ZeroCheckpointsReshardToAnyWorldSize) {
  const std::string dir = testing_dist::temp_dir("trainer_reshard");
  for (int written : {1, 3}) {
    TrainerOptions o = quiet_fp32(8, 2);
    o.zero.stage = written;
    o.checkpoint.dir = dir + "/w" + std::to_string(written);
    o.loop.max_steps = 4;  // mid-epoch 1
    const Trained first = train_user_net(2, o, mse(), true, native, true);
    ASSERT_FALSE(first.result.last_checkpoint.empty());
    // Note [Optimizer shard files]: one file per rank's shard.
    const std::string ck = first.result.last_checkpoint;
    for (const char* f : {"/optimizer.shard0.pt", "/optimizer.shard1.pt", "/optimizer.shards.json"})
      EXPECT_TRUE(std::filesystem::exists(ck + f)) << f;
    EXPECT_FALSE(std::filesystem::exists(ck + "/optimizer.shard2.pt"));
    for (int world : {4, 1})
      for (int stage : {1, 3, 0}) {
        TrainerOptions r = quiet_fp32(8, 2);
        r.zero.stage = stage;
        r.checkpoint.resume_from = first.result.last_checkpoint;
        r.loop.max_steps = 4;  // nothing left: the state as loaded
        const Trained loaded = train_user_net(world, r, mse(), true, native, true);
        EXPECT_FALSE(loaded.result.nothing_to_train.empty());
        EXPECT_EQ(loaded.result.optimizer_fingerprint, first.result.optimizer_fingerprint)
            << "written at world 2 stage " << written << ", loaded at world " << world << " stage " << stage;
        EXPECT_EQ(max_diff(loaded.params, first.params), 0.0);
        r.loop.max_steps = 0;
        const Trained on = train_user_net(world, r, mse(), true, native, true);
        // 96 samples, batch 8: 4 steps of world 2 leave 32 of epoch 1 (world 4: 1 step; world 1:
        // 4), then epoch 2 (world 4: 3 steps; world 1: 12).
        EXPECT_EQ(on.result.global_step, world == 4 ? 4 + 1 + 3 : 4 + 4 + 12) << "world " << world;
      }
  }
  std::filesystem::remove_all(dir);
}

// A library user's bad options are clear errors naming the field, its value and the fix in
// the library's words, before any collective (Note [Options named by their field]).
TEST(Trainer, BadOptionsNameTheField) {
  for (auto [set, field] : std::vector<std::pair<std::function<void(TrainerOptions&)>, std::string>>{
           {[](TrainerOptions& o) { o.data.batch_size = 0; },
            "TrainerOptions::data.batch_size=0 must be > 0; pass the per-rank batch size, e.g. "
            "TrainerOptions::data.batch_size = 64"},
           {[](TrainerOptions& o) { o.loop.grad_accum_steps = 0; },
            "TrainerOptions::loop.grad_accum_steps=0"},
           {[](TrainerOptions& o) { o.report.log_interval = 0; }, "TrainerOptions::report.log_interval=0"},
           {[](TrainerOptions& o) { o.optim.min_lr_ratio = 2; }, "TrainerOptions::optim.min_lr_ratio=2"},
           {[](TrainerOptions& o) { o.zero.stage = 4; }, "TrainerOptions::zero.stage=4 is not available"},
           {[](TrainerOptions& o) {
              o.zero.stage = 2;
              o.ddp.comm_hook = CommHook::kFp16;
            },
            "does not combine with TrainerOptions::ddp.comm_hook or "
            "TrainerOptions::ddp.gradient_as_bucket_view"},
           {[](TrainerOptions& o) {
              o.optim.lr_schedule = LrSchedule::kAuto;  // SGD: epoch_cosine, which has no warmup
              o.optim.warmup_steps = 5;
            },
            "TrainerOptions::optim.warmup_steps=5 needs the per-step schedule; pass "
            "TrainerOptions::optim.lr_schedule = step_cosine"},
           {[](TrainerOptions& o) { o.report.enable_profiling = true; },
            "TrainerOptions::report.enable_profiling writes its trace to TrainerOptions::checkpoint.dir"}}) {
    TrainerOptions o = quiet_fp32(8, 1);
    set(o);
    try {
      train_user_net(1, o);
      ADD_FAILURE() << "no error for " << field;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

// The CLI's --init_from and --keep_global_batch are the library's (#29 item 4):
// checkpoint.init_from starts from a checkpoint's model.pt, and loop.keep_global_batch keeps a
// checkpoint's global batch at another world size, or names the fields where it cannot.
TEST(Trainer, InitFromAndKeepGlobalBatchAreOptions) {
  const std::string dir = testing_dist::temp_dir("trainer_powers");
  TrainerOptions o = quiet_fp32(4, 1);
  o.loop.grad_accum_steps = 2;  // world 2: global batch 16, 6 steps per epoch of 96 samples
  o.checkpoint.dir = dir;
  o.loop.max_steps = 3;  // stops and saves halfway through the epoch
  const Trained first = train_user_net(2, o);
  ASSERT_FALSE(first.result.last_checkpoint.empty());
  TrainerOptions init = quiet_fp32(4, 0);
  init.checkpoint.init_from = first.result.last_checkpoint + "/model.pt";
  EXPECT_EQ(max_diff(train_user_net(1, init).params, first.params), 0.0) << "init_from was not loaded";
  TrainerOptions resumed = o;
  resumed.checkpoint.dir = "";
  resumed.checkpoint.resume_from = first.result.last_checkpoint;
  resumed.loop.max_steps = 0;
  // World 4 at accumulation 2 doubles the global batch: the 48 samples left are 2 steps (one
  // partial); keeping 16 takes accumulation 1: 3 steps.
  EXPECT_EQ(train_user_net(4, resumed).result.global_step, 3 + 2);
  resumed.loop.keep_global_batch = true;
  EXPECT_EQ(train_user_net(4, resumed).result.global_step, 3 + 3);
  try {
    train_user_net(3, resumed);
    ADD_FAILURE() << "16 is not a multiple of 4 x 3, yet world 3 kept it";
  } catch (const UsageError& e) {
    EXPECT_NE(
        std::string(e.what()).find("TrainerOptions::loop.keep_global_batch: the checkpoint's global batch "
                                   "16 is not a multiple of TrainerOptions::data.batch_size 4 x world 3"),
        std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// The CLI's --resume_from auto and its run identity are the library's (#29 item 4, Note [Run
// identity]): resume_from "auto" continues this run's newest checkpoint and starts fresh in an
// empty folder; a checkpoint of another run_identity is refused, naming what differs, whether
// auto finds only it or resume_from names it.
TEST(Trainer, ResumeAutoFollowsTheRunIdentity) {
  const std::string dir = testing_dist::temp_dir("trainer_resume_auto");
  TrainerOptions o = quiet_fp32(4, 1);
  o.checkpoint.dir = dir;
  o.checkpoint.resume_from = "auto";
  o.run_identity = {{"data", "user data v1"}, {"lr", "0.1"}};
  o.loop.max_steps = 3;
  const Trained first = train_user_net(2, o);
  EXPECT_EQ(first.result.global_step, 3) << "auto in an empty folder starts fresh";
  ASSERT_FALSE(first.result.last_checkpoint.empty());
  const Trained again = train_user_net(2, o);
  EXPECT_FALSE(again.result.nothing_to_train.empty()) << "auto did not resume the step-3 checkpoint";
  o.loop.max_steps = 5;
  EXPECT_EQ(train_user_net(2, o).result.global_step, 5);
  TrainerOptions other = o;
  other.run_identity["lr"] = "0.2";
  for (const std::string& from : {std::string("auto"), first.result.last_checkpoint}) {
    other.checkpoint.resume_from = from;
    try {
      train_user_net(1, other);
      ADD_FAILURE() << "resume_from " << from << " continued another run";
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("belongs to another run; what differs: lr 0.2 (the checkpoint's: 0.1)"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(from == "auto" ? "TrainerOptions::checkpoint.resume_from = auto: "
                                           "TrainerOptions::checkpoint.dir holds only another run's"
                                         : "TrainerOptions::checkpoint.resume_from: the checkpoint '" + from),
                std::string::npos)
          << what;
    }
  }
  std::filesystem::remove_all(dir);
}
