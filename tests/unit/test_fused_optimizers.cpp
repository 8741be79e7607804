// Note [Fused optimizers] and Note [No host sync in a step]: FusedAdamW and FusedSGD step as
// torch::optim's loops do within a stated bound (20 steps, weight decay, amsgrad, momentum
// variants, parameters without a gradient), under ZeRO's shards and across a checkpoint resume;
// build_optimizer's choice; clip_grad_norm equals torch's bitwise without reading the device,
// and a training step reads no device value on the host.
#include <gtest/gtest.h>

#include <ATen/record_function.h>
#include <torch/nn/utils/clip_grad.h>

#include "optim/grad_clip.h"
#include "train/optimizer.h"
#include "trainer_fixtures.h"
#include "util/torch_compat.h"

using namespace ddptrain;
using namespace ddptrain::trainer_test;

namespace {

#define SKIP_WITHOUT_FUSED_KERNELS() \
  if (!compat::kHasFusedOptimizers)  \
  GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no fused optimizer kernels"

// Parameters of the shapes a model has (matrices, vectors, a scalar-sized one), two copies.
std::vector<at::Tensor> make_params(uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> out;
  for (auto shape : std::vector<std::vector<int64_t>>{{33, 17}, {17}, {5, 3, 3, 3}, {1}, {130}})
    out.push_back(at::randn(shape).requires_grad_());
  return out;
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& ps) {
  std::vector<at::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

// Two groups, as build_optimizer makes AdamW: matrices with weight decay, the rest without.
std::vector<torch::optim::OptimizerParamGroup> adamw_groups(const std::vector<at::Tensor>& ps, bool amsgrad) {
  std::vector<at::Tensor> decay, none;
  for (const auto& p : ps) (p.dim() >= 2 ? decay : none).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(decay,
                 std::make_unique<torch::optim::AdamWOptions>(
                     torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0.1).amsgrad(amsgrad)));
  g.emplace_back(none,
                 std::make_unique<torch::optim::AdamWOptions>(
                     torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(0).amsgrad(amsgrad)));
  return g;
}

// Steps both optimizers `steps` times with the same gradients (parameter 3 has none in steps 0-4
// and 12: a late first step, and a step without it; each in its parameter's layout, as
// autograd's, or contiguous: contiguous_grads), the learning rate changed every step as a
// schedule does; returns the largest difference of parameters and states, relative to 1.
double step_both(torch::optim::Optimizer& loop, const std::vector<at::Tensor>& a,
                 torch::optim::Optimizer& fused, const std::vector<at::Tensor>& b, int steps,
                 bool contiguous_grads = false) {
  at::manual_seed(99);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < a.size(); ++i) {
      const bool none = i == 3 && (s < 5 || s == 12);
      const at::Tensor g = at::randn(a[i].sizes()) * (1.0 + s);
      const auto laid = [&](const at::Tensor& p) {
        return contiguous_grads ? g.clone() : at::empty_like(p, at::MemoryFormat::Preserve).copy_(g);
      };
      a[i].mutable_grad() = none ? at::Tensor() : laid(a[i]);
      b[i].mutable_grad() = none ? at::Tensor() : laid(b[i]);
    }
    for (auto* opt : {&loop, &fused}) set_lr(*opt, 3e-3 * (1.0 - s / (2.0 * steps)));
    loop.step();
    fused.step();
  }
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  const auto sa = optimizer_state_tensors(loop), sb = optimizer_state_tensors(fused);
  EXPECT_EQ(sa.size(), sb.size()) << "the fused optimizer keeps the loop's state";
  for (size_t i = 0; i < sa.size() && i < sb.size(); ++i) {
    EXPECT_EQ(sa[i].defined(), sb[i].defined());
    if (sa[i].defined() && sb[i].defined())
      d = std::max(d, ((sa[i] - sb[i]).abs() / (sa[i].abs() + 1)).max().item<double>());
  }
  return d;
}

// aten::_local_scalar_dense calls on this thread (what .item() and a tensor's bool dispatch),
// counted by counting_reads' callback; not those inside ATen's fused optimizer kernels: their
// CPU kernels read each step count (a float tensor) on the host, the CUDA kernels read it on
// the device (no sync there).
int64_t* thread_reads() {
  thread_local int64_t n = 0;
  return &n;
}

int* inside_fused_kernel() {
  thread_local int depth = 0;
  return &depth;
}

bool is_fused_kernel(const at::RecordFunction& fn) {
  const std::string name = fn.name();
  return name == "aten::_fused_adamw_" || name == "aten::_fused_sgd_";
}

at::CallbackHandle counting_reads() {
  *thread_reads() = 0;
  *inside_fused_kernel() = 0;
  return at::addThreadLocalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
            if (is_fused_kernel(fn)) ++*inside_fused_kernel();
            if (*inside_fused_kernel() == 0 && std::string(fn.name()) == "aten::_local_scalar_dense")
              ++*thread_reads();
            return nullptr;
          },
          [](const at::RecordFunction& fn, at::ObserverContext*) {
            if (is_fused_kernel(fn)) --*inside_fused_kernel();
          })
          .scopes({at::RecordScope::FUNCTION}));
}

double moved(const std::vector<at::Tensor>& before, const std::vector<at::Tensor>& after) {
  double d = 0;
  for (size_t i = 0; i < before.size(); ++i)
    d = std::max(d, (before[i] - after[i]).abs().max().item<double>());
  return d;
}

}  // namespace

// The bound: ATen's kernel orders the same update differently (Note [Fused optimizers]); over
// 20 steps with weight decay, gradients growing to 20x, the parameters and moments stay within
// 1e-5 of the loop's, relative to 1 (measured 1.3e-6 on 2.15; SGD with nesterov 2.8e-6).
TEST(FusedOptimizers, AdamWTwentyStepsEqualTheLoopWithinTheBound) {
  SKIP_WITHOUT_FUSED_KERNELS();
  for (bool amsgrad : {false, true}) {
    const auto a = make_params(1), b = copies(a), start = copies(a);
    torch::optim::AdamW loop(adamw_groups(a, amsgrad), torch::optim::AdamWOptions(3e-3));
    FusedAdamW fused(adamw_groups(b, amsgrad), torch::optim::AdamWOptions(3e-3));
    const double d = step_both(loop, a, fused, b, 20);
    std::printf("AdamW%s: fused vs loop after 20 steps, max difference %g\n", amsgrad ? " amsgrad" : "", d);
    EXPECT_LE(d, 1e-5) << "amsgrad " << amsgrad;
    EXPECT_GT(moved(start, b), 1e-3) << "the fused optimizer did not step";
    // The step counts are the loop's: parameter 3 was stepped 14 times of 20.
    auto& s3 =
        static_cast<torch::optim::AdamWParamState&>(*fused.state().at(compat::optimizer_state_key(b[3])));
    EXPECT_EQ(s3.step(), 14);
  }
}

TEST(FusedOptimizers, SgdTwentyStepsEqualTheLoopWithinTheBound) {
  SKIP_WITHOUT_FUSED_KERNELS();
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const Case& c : {Case{0.9, 0, 1e-4, false}, Case{0.9, 0, 1e-4, true}, Case{0.8, 0.1, 0, false},
                        Case{0, 0, 1e-4, false}}) {
    const auto a = make_params(2), b = copies(a), start = copies(a);
    const auto o = torch::optim::SGDOptions(0.05)
                       .momentum(c.momentum)
                       .dampening(c.dampening)
                       .weight_decay(c.weight_decay)
                       .nesterov(c.nesterov);
    torch::optim::SGD loop(a, o);
    FusedSGD fused(b, o);
    const double d = step_both(loop, a, fused, b, 20);
    std::printf("SGD momentum %g dampening %g weight decay %g nesterov %d: fused vs loop max difference %g\n",
                c.momentum, c.dampening, c.weight_decay, c.nesterov, d);
    EXPECT_LE(d, 1e-5) << "momentum " << c.momentum << " nesterov " << c.nesterov;
    EXPECT_GT(moved(start, b), 1e-3) << "the fused optimizer did not step";
  }
}

// A state kept in another layout than its parameter's: a checkpoint's optimizer state keeps the
// layout it was saved in, and a resume with another --memory_format changes only the
// parameters' (here: the 4-D weight turned channels-last after 5 steps, its moments or momentum
// contiguous; then its gradients contiguous too, as a program's own may be). The fused
// optimizers step as the loops do; before, ATen's CPU kernel paired each element with
// another's moment or gradient (and CUDA's refused the mixed strides).
TEST(FusedOptimizers, AStateInAnotherLayoutThanItsParameterStepsAsTheLoopDoes) {
  SKIP_WITHOUT_FUSED_KERNELS();
  const auto channels_last = [](const at::Tensor& p) {
    p.set_data(p.detach().contiguous(at::MemoryFormat::ChannelsLast));
  };
  for (const bool adamw : {true, false}) {
    SCOPED_TRACE(adamw ? "AdamW" : "SGD");
    const auto a = make_params(3), b = copies(a);
    const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4);
    std::unique_ptr<torch::optim::Optimizer> loop, fused;
    if (adamw) {
      loop = std::make_unique<torch::optim::AdamW>(adamw_groups(a, true), torch::optim::AdamWOptions(3e-3));
      fused = std::make_unique<FusedAdamW>(adamw_groups(b, true), torch::optim::AdamWOptions(3e-3));
    } else {
      loop = std::make_unique<torch::optim::SGD>(a, sgd);
      fused = std::make_unique<FusedSGD>(b, sgd);
    }
    EXPECT_LE(step_both(*loop, a, *fused, b, 5), 1e-5);
    channels_last(a[2]);
    channels_last(b[2]);
    ASSERT_FALSE(b[2].is_contiguous());
    EXPECT_LE(step_both(*loop, a, *fused, b, 5), 1e-5);
    EXPECT_LE(step_both(*loop, a, *fused, b, 5, /*contiguous_grads=*/true), 1e-5);
  }
}

// Note [Fused optimizers]: auto is fused on CUDA only; on is fused on every device (or refused
// where LibTorch has no kernels); off never. ZeRO's shard optimizer keeps the choice.
TEST(FusedOptimizers, BuildOptimizerChoosesByTheOptionAndTheDevice) {
  const auto ps = make_params(3);
  OptimizerOptions o;
  for (auto kind : {OptimizerKind::kSgd, OptimizerKind::kAdamw}) {
    o.optimizer = kind;
    o.fused = FusedOptimizer::kAuto;
    EXPECT_FALSE(is_fused_optimizer(*build_optimizer(o, ps))) << "auto on CPU parameters is the loop";
    o.fused = FusedOptimizer::kOff;
    EXPECT_FALSE(is_fused_optimizer(*build_optimizer(o, ps)));
    o.fused = FusedOptimizer::kOn;
    if (compat::kHasFusedOptimizers) {
      const auto opt = build_optimizer(o, ps);
      EXPECT_TRUE(is_fused_optimizer(*opt));
      EXPECT_EQ(kind == OptimizerKind::kAdamw, dynamic_cast<FusedAdamW*>(opt.get()) != nullptr);
      EXPECT_EQ(opt->param_groups().size(), kind == OptimizerKind::kAdamw ? 2u : 1u);
    } else {
      EXPECT_THROW(build_optimizer(o, ps), UsageError);
    }
  }
}

// ZeRO stages 1-3 with the fused optimizers train as fused stage 0 (the shards step through
// fused_optimizer_like), and differ from the loop's run: the shards really are fused.
TEST(FusedOptimizers, ZeroStagesWithFusedOptimizersTrainAsStageZero) {
  SKIP_WITHOUT_FUSED_KERNELS();
  for (bool adamw : {false, true}) {
    TrainerOptions o = quiet_fp32(8, 2);
    o.optim.clip_grad_norm = 0.05;
    const Trained zero = train_user_net(2, o, mse(), true, native, adamw, {}, /*fused=*/true);
    const Trained loop = train_user_net(2, o, mse(), true, native, adamw, {}, /*fused=*/false);
    std::printf("%s: fused vs loop at stage 0, max |weight diff| %g\n", adamw ? "adamw" : "sgd",
                max_diff(zero.params, loop.params));
    EXPECT_LE(max_diff(zero.params, loop.params), 1e-5);
    for (int stage : {1, 2, 3}) {
      o.zero.stage = stage;
      const Trained z = train_user_net(2, o, mse(), true, native, adamw, {}, true);
      const double diff = max_diff(zero.params, z.params);
      std::printf("%s fused: stage %d vs stage 0 max |weight diff| %g\n", adamw ? "adamw" : "sgd", stage,
                  diff);
      EXPECT_LE(diff, 1e-6) << (adamw ? "adamw" : "sgd") << " stage " << stage;
      EXPECT_EQ(z.result.global_step, zero.result.global_step);
    }
    o.zero.stage = 0;
  }
}

// A fused run's mid-epoch checkpoint resumes bitwise equal to the uninterrupted fused run (the
// state is the loop's AdamWParamState, step counts included); a loop run's checkpoint resumes
// under the fused optimizer (the same state) and ends within the bound.
TEST(FusedOptimizers, CheckpointsResumeBitwiseAndAcrossTheImplementations) {
  SKIP_WITHOUT_FUSED_KERNELS();
  const std::string dir = testing_dist::temp_dir("fused_resume");
  TrainerOptions o = quiet_fp32(8, 2);
  o.optim.lr_schedule = LrSchedule::kEpochCosine;
  o.checkpoint.dir = dir + "/whole";
  const Trained whole = train_user_net(2, o, mse(), true, native, true, {}, true);
  o.checkpoint.dir = dir + "/parts";
  o.loop.max_steps = 4;
  const Trained first = train_user_net(2, o, mse(), true, native, true, {}, true);
  o.checkpoint.dir = dir + "/loop";
  const Trained first_loop = train_user_net(2, o, mse(), true, native, true, {}, false);
  o.checkpoint.dir = dir + "/resumed";
  ASSERT_FALSE(first.result.last_checkpoint.empty());
  o.loop.max_steps = 0;
  o.checkpoint.resume_from = first.result.last_checkpoint;
  const Trained resumed = train_user_net(2, o, mse(), true, native, true, {}, true);
  EXPECT_EQ(resumed.result.global_step, 12);
  EXPECT_EQ(max_diff(resumed.params, whole.params), 0.0);
  EXPECT_EQ(resumed.result.optimizer_fingerprint, whole.result.optimizer_fingerprint);
  o.checkpoint.resume_from = first_loop.result.last_checkpoint;
  const Trained switched = train_user_net(2, o, mse(), true, native, true, {}, true);
  EXPECT_EQ(switched.result.global_step, 12);
  EXPECT_LE(max_diff(switched.params, whole.params), 1e-6);
  std::filesystem::remove_all(dir);
}

// Note [No host sync in a step]: the same gradients and norm as torch's clip_grad_norm_, with
// no device value read on the host (no aten::_local_scalar_dense, what .item() dispatches).
TEST(FusedOptimizers, ClipGradNormEqualsTorchsWithoutAHostRead) {
  for (double max_norm : {0.5, 1e6}) {  // clipping, and a coefficient of 1
    const auto a = make_params(4), b = copies(a);
    at::manual_seed(7);
    for (size_t i = 0; i < a.size(); ++i) {
      const at::Tensor g = at::randn(a[i].sizes());
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    const double want = torch::nn::utils::clip_grad_norm_(a, max_norm);
    const auto handle = counting_reads();
    const at::Tensor got = clip_grad_norm(b, max_norm);
    at::removeCallback(handle);
    const int64_t reads = *thread_reads();
    EXPECT_EQ(reads, 0) << "clip_grad_norm read the device";
    ASSERT_TRUE(got.defined());
    EXPECT_EQ(got.dim(), 0);
    EXPECT_EQ(got.item<double>(), want);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(at::equal(a[i].grad(), b[i].grad())) << "parameter " << i;
  }
  EXPECT_FALSE(clip_grad_norm(copies(make_params(5)), 1.0).defined()) << "no gradients: no norm";
}

// Note [No host sync in a step], the design check on CPU: a training run's host reads
// (aten::_local_scalar_dense) do not grow with its steps. 4 and 10 optimizer steps with clipping,
// AdamW (fused and loop), ZeRO stages 0 and 2, no log line between: the same count (the reads
// at start and at the end only).
TEST(FusedOptimizers, ATrainingStepReadsNoDeviceValueOnTheHost) {
  for (int stage : {0, 2})
    for (bool fused : {false, true}) {
      if (fused && !compat::kHasFusedOptimizers) continue;
      std::vector<int64_t> reads;
      for (int steps : {4, 10}) {
        TrainerOptions o = quiet_fp32(4, 1);
        o.optim.clip_grad_norm = 0.05;
        o.loop.max_steps = steps;
        o.zero.stage = stage;
        std::atomic<int64_t> count{0};
        std::mutex mu;
        testing_dist::run_world(2, [&](const DistContext& ctx) {
          Trainable model = native(make_net());
          const auto optimizer = make_optimizer(*model.module, true, fused);
          UserData train(96, true);
          Trainer trainer(ctx, std::move(model), *optimizer, o, mse());
          const auto handle = counting_reads();
          trainer.fit(train, nullptr);
          at::removeCallback(handle);
          std::lock_guard<std::mutex> lock(mu);
          if (ctx.rank() == 0) count = *thread_reads();
        });
        reads.push_back(count);
      }
      std::printf("stage %d %s: host reads in a run of 4 steps %lld, of 10 steps %lld\n", stage,
                  fused ? "fused" : "loop", static_cast<long long>(reads[0]),
                  static_cast<long long>(reads[1]));
      EXPECT_GT(reads[0], 0) << "the callback saw nothing: the check would pass silently";
      EXPECT_EQ(reads[0], reads[1]) << "stage " << stage << (fused ? " fused" : " loop")
                                    << ": host reads grow with the steps";
    }
}
