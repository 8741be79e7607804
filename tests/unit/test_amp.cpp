// Loss scaling (against PyTorch's GradScaler algorithm), gradient clipping on unscaled
// gradients, and activation recompute (gradients bitwise those of a plain backward).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>

#include "dist_harness.h"
#include "models/mini_resnet.h"
#include "models/recompute.h"
#include "obs/memory.h"
#include "train/grad_scaler.h"
#include "util/torch_compat.h"

using namespace ddptrain;

namespace {

// One parameter whose gradient the test sets by hand.
struct OneParam {
  torch::Tensor w = torch::zeros({3}).requires_grad_(true);
  torch::optim::SGD opt{{w}, torch::optim::SGDOptions(0.1).momentum(0.9)};
  void set_grad(float v) { w.mutable_grad() = torch::full({3}, v); }
};

std::vector<at::Tensor> clone_all(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.defined() ? t.detach().clone() : at::Tensor());
  return out;
}

bool bitwise_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].defined() != b[i].defined()) return false;
    if (a[i].defined() && !torch::equal(a[i], b[i])) return false;
  }
  return true;
}

}  // namespace

TEST(GradScaler, PyTorchsSmallCase) {
  // PyTorch's test_grad_scaling_update_scale: init 4, growth 2, backoff 0.25, interval 2.
  GradScaler s({true, 4.0, 2.0, 0.25, 2});
  OneParam p;
  p.set_grad(1.0f);
  s.step(p.opt);
  s.update();
  EXPECT_EQ(s.current_scale(), 4.0);
  EXPECT_EQ(s.state().growth_tracker, 1);
  p.set_grad(1.0f);
  s.step(p.opt);
  s.update();
  EXPECT_EQ(s.current_scale(), 8.0);
  EXPECT_EQ(s.state().growth_tracker, 0);
  p.set_grad(std::numeric_limits<float>::infinity());
  EXPECT_FALSE(s.step(p.opt));
  s.update();
  EXPECT_EQ(s.current_scale(), 2.0);
  EXPECT_EQ(s.state().growth_tracker, 0);
}

// PyTorch scales in the promoted dtype (`outputs * self._scale`, an fp32 tensor): a user's
// fp16 loss times 65536 is 65536 in fp32, not inf in fp16; an fp32 loss stays fp32.
TEST(GradScaler, ScalesAnFp16LossInFp32) {
  GradScaler s({true, 65536.0, 2.0, 0.5, 2000});
  const at::Tensor half = s.scale(torch::ones({}, at::kHalf));
  EXPECT_EQ(half.scalar_type(), at::kFloat);
  EXPECT_EQ(half.item<double>(), 65536.0);
  const at::Tensor single = s.scale(torch::full({}, 0.5f));
  EXPECT_EQ(single.scalar_type(), at::kFloat);
  EXPECT_EQ(single.numel(), 1);  // shape (1), as PyTorch's
  EXPECT_EQ(single.item<double>(), 32768.0);
}

TEST(GradScaler, GrowsAfterTheIntervalAndNeverToInf) {
  GradScaler s({true, 65536.0, 2.0, 0.5, 3});
  OneParam p;
  for (int i = 0; i < 3; ++i) {
    p.set_grad(0.5f);
    EXPECT_TRUE(s.step(p.opt));
    s.update();
  }
  EXPECT_EQ(s.current_scale(), 131072.0);  // grew once, after 3 finite steps
  GradScaler big({true, 3.0e38, 2.0, 0.5, 1});
  p.set_grad(0.5f);
  big.step(p.opt);
  big.update();
  EXPECT_FLOAT_EQ(static_cast<float>(big.current_scale()), 3.0e38f) << "grew to inf";
  EXPECT_TRUE(std::isfinite(big.current_scale()));
}

// A checkpoint's growth count past a resumed run's shorter --scaler_growth_interval: the scale
// grows at the next finite step. It never grew again (the count must meet the interval).
TEST(GradScaler, ACheckpointsCountPastAShorterIntervalGrowsAtTheNextStep) {
  GradScaler s({true, 1024.0, 2.0, 0.5, 2});
  s.load({65536.0, 10});
  OneParam p;
  p.set_grad(0.5f);
  EXPECT_TRUE(s.step(p.opt));
  s.update();
  EXPECT_EQ(s.current_scale(), 131072.0);
  EXPECT_EQ(s.state().growth_tracker, 0);
}

TEST(GradScaler, UnscalesBeforeTheStepAndSkipsInfWithStateBitwiseUnchanged) {
  GradScaler s({true, 1024.0, 2.0, 0.5, 2000});
  OneParam p;
  p.set_grad(1024.0f * 3.0f);
  s.unscale(p.opt);
  s.unscale(p.opt);  // a second call in the same step does nothing
  EXPECT_TRUE(torch::equal(p.w.grad(), torch::full({3}, 3.0f)));
  EXPECT_TRUE(s.step(p.opt));
  s.update();
  const auto params = clone_all({p.w});
  auto& st = static_cast<torch::optim::SGDParamState&>(*p.opt.state().begin()->second);
  const auto momentum = st.momentum_buffer().clone();
  p.set_grad(std::nanf(""));
  EXPECT_FALSE(s.step(p.opt));
  s.update();
  EXPECT_TRUE(bitwise_equal(clone_all({p.w}), params)) << "a skipped step changed the parameters";
  EXPECT_TRUE(torch::equal(st.momentum_buffer(), momentum)) << "a skipped step changed the optimizer state";
  EXPECT_EQ(s.current_scale(), 512.0);
}

// Note [ZeRO stage 2]: a rank sees only its gradient shard; an inf on one rank's shard must
// skip the step on every rank (GradScaler::agree sums the flag over the ranks).
TEST(GradScaler, AnInfOnOneRanksShardSkipsTheStepOnEveryRank) {
  std::vector<int> stepped(2, -1), stepped_without_agree(2, -1);
  testing_dist::run_ranks(2, [&](const DistContext& ctx) {
    for (bool agree : {true, false}) {
      GradScaler s({true, 1024.0, 2.0, 0.5, 2000});
      const float g = ctx.rank() == 1 ? std::numeric_limits<float>::infinity() : 1024.0f;
      s.unscale(std::vector<at::Tensor>{torch::full({3}, g)});
      if (agree) s.agree(ctx);
      bool did = false;
      torch::optim::SGD none(std::vector<at::Tensor>{torch::zeros({1}, torch::requires_grad())}, 0.1);
      s.step(none, [&] { did = true; });
      (agree ? stepped : stepped_without_agree)[static_cast<size_t>(ctx.rank())] = did ? 1 : 0;
    }
  });
  EXPECT_EQ(stepped, (std::vector<int>{0, 0})) << "every rank skips";
  EXPECT_EQ(stepped_without_agree, (std::vector<int>{1, 0}))
      << "without the agreement the ranks would diverge";
}

TEST(GradScaler, DisabledIsInert) {
  GradScaler s({false});
  OneParam p;
  auto loss = torch::tensor(2.5f);
  EXPECT_TRUE(s.scale(loss).is_same(loss));
  p.set_grad(std::numeric_limits<float>::infinity());
  EXPECT_TRUE(s.step(p.opt));  // no inf check at all: it just steps
  EXPECT_EQ(s.current_scale(), 1.0);
}

TEST(GradScaler, ScaledTrainingEqualsUnscaledThatSkipsTheInfStep) {
  // fp32, scaler on (init 128, interval 1), an inf in the loss at step 2 of 4; against an
  // unscaled run that skips step 2. Clipping on unscaled gradients in both.
  auto run = [](bool scaled) {
    torch::manual_seed(5);
    torch::nn::Linear net(6, 3);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    GradScaler scaler({scaled, 128.0, 2.0, 0.5, 1});
    auto x = torch::randn({4, 8, 6});
    auto y = torch::randint(0, 3, {4, 8});
    for (int step = 1; step <= 4; ++step) {
      for (auto& p : net->parameters()) p.mutable_grad().reset();
      auto loss = torch::nn::functional::cross_entropy(net(x[step - 1]), y[step - 1]);
      const bool poisoned = step == 2;
      if (poisoned && scaled) loss = loss * std::numeric_limits<float>::infinity();
      if (poisoned && !scaled) continue;  // the reference simply skips it
      scaler.scale(loss).backward();
      scaler.unscale(opt);
      torch::nn::utils::clip_grad_norm_(net->parameters(), 0.5);
      const bool stepped = scaler.step(opt);
      scaler.update();
      EXPECT_EQ(stepped, !poisoned) << "step " << step;
    }
    if (scaled) {
      // Interval 1: 128 -> 256 (finite), -> 128 (inf), -> 256, -> 512.
      EXPECT_EQ(scaler.current_scale(), 512.0);
    }
    return clone_all(net->parameters());
  };
  auto a = run(true), b = run(false);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-7)) << i;
}

TEST(Recompute, GradientsAndBuffersBitwiseEqualToAPlainBackwardWithDropout) {
  auto run = [](bool recompute) {
    torch::manual_seed(3);
    MiniResNetOptions o{3, 10, 0.25};
    o.dropout = 0.2;
    o.recompute_blocks = recompute;
    MiniResNet m(o);
    auto x = torch::randn({6, 3, 8, 8});
    auto y = torch::randint(0, 10, {6});
    torch::manual_seed(99);  // the dropout masks
    auto loss = torch::nn::functional::cross_entropy(m->forward(x), y);
    loss.backward();
    std::vector<at::Tensor> grads, buffers;
    for (auto& p : m->parameters()) grads.push_back(p.grad().clone());
    for (auto& b : m->buffers()) buffers.push_back(b.clone());
    const float after = torch::rand({1}).item<float>();  // the RNG stream continues as without
    return std::make_tuple(grads, buffers, loss.item<double>(), after);
  };
  auto [g0, b0, l0, r0] = run(false);
  auto [g1, b1, l1, r1] = run(true);
  EXPECT_EQ(l0, l1);
  EXPECT_TRUE(bitwise_equal(g0, g1)) << "gradients differ with recompute";
  EXPECT_TRUE(bitwise_equal(b0, b1)) << "running statistics updated twice";
  EXPECT_EQ(r0, r1) << "recompute left the RNG elsewhere";
}

// A forward run without autocast and its backward run inside an autocast region (a library
// user's loop): the replay runs without autocast too, so the gradients are the fp32 forward's,
// bitwise those of a plain backward (the replay ran in bf16: another forward's gradients).
TEST(Recompute, AForwardWithoutAutocastReplaysWithoutItInsideAnAutocastRegion) {
  torch::manual_seed(5);
  const at::Tensor weight = torch::randn({64, 64}).requires_grad_();
  const at::Tensor x = torch::randn({8, 64});
  const auto fn = [&](const at::Tensor& in) { return at::tanh(at::mm(in, weight)); };
  auto grad_of = [&](bool recomputed) {
    weight.mutable_grad().reset();
    const at::Tensor y = recomputed ? recompute(fn, x, {weight}, {}) : fn(x);
    compat::AutocastGuard autocast(c10::kCPU, at::kBFloat16, true);
    y.square().sum().backward();
    return weight.grad().clone();
  };
  const at::Tensor plain = grad_of(false), recomputed = grad_of(true);
  EXPECT_EQ(recomputed.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::equal(plain, recomputed)) << "max diff " << (plain - recomputed).abs().max().item<double>();
}

TEST(Recompute, HoldsLessActivationMemory) {
  // What the forward leaves for backward (activations), and the peak during backward.
  install_cpu_memory_accounting();
  const c10::Device cpu(c10::kCPU);
  auto measure = [&](bool recompute) {
    torch::manual_seed(3);
    MiniResNetOptions o{3, 10, 0.5};
    o.recompute_blocks = recompute;
    MiniResNet m(o);
    auto x = torch::randn({32, 3, 16, 16});
    auto y = torch::randint(0, 10, {32});
    const int64_t start = memory_stats(cpu).current_bytes;
    reset_peak_memory(cpu);
    auto loss = torch::nn::functional::cross_entropy(m->forward(x), y);
    const int64_t held = memory_stats(cpu).current_bytes - start;
    loss.backward();
    return std::make_pair(held, memory_stats(cpu).peak_bytes - start);
  };
  const auto [held_plain, peak_plain] = measure(false);
  const auto [held_rc, peak_rc] = measure(true);
  std::printf("activations held after forward: %.1f MiB plain, %.1f MiB recompute; peak: %.1f vs %.1f MiB\n",
              held_plain / 1048576.0, held_rc / 1048576.0, peak_plain / 1048576.0, peak_rc / 1048576.0);
  ASSERT_GT(held_plain, 0);
  EXPECT_LT(held_rc * 2, held_plain) << "recompute should hold at least 2x fewer activations";
  EXPECT_LT(peak_rc, peak_plain);
}

// Under autocast, a recomputed block's forward keeps no cast of its weights: autocast caches
// the bf16 copy of an fp32 parameter (a leaf, not a view) until the outermost autocast region
// ends, grad mode or not, so every recomputed block's cast weights stayed for the whole
// forward. A 1024 x 1024 weight through mm (on CUDA linear caches too; on CPU linear casts the
// transposed view, which autocast does not cache): its bf16 copy is 2 MiB; what the forward
// leaves is the 2 KiB input and output.
TEST(Recompute, UnderAutocastTheForwardKeepsNoCastWeights) {
  install_cpu_memory_accounting();
  const c10::Device cpu(c10::kCPU);
  const at::Tensor weight = torch::randn({1024, 1024}).requires_grad_();
  const at::Tensor x = torch::randn({1, 1024});
  auto held_after_forward = [&](bool recomputed) {
    compat::AutocastGuard autocast(c10::kCPU, at::kBFloat16, true);
    const int64_t start = memory_stats(cpu).current_bytes;
    const auto fn = [&](const at::Tensor& in) { return at::mm(in, weight); };
    const at::Tensor y = recomputed ? recompute(fn, x, {weight}, {}) : fn(x);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    return memory_stats(cpu).current_bytes - start;  // still in the autocast region
  };
  const int64_t plain = held_after_forward(false), recomputed = held_after_forward(true);
  EXPECT_GE(plain, 2 << 20) << "the plain forward keeps the cast weights (for its backward)";
  EXPECT_LT(recomputed, 1 << 20) << "the recomputed forward kept its cast weights";
}
