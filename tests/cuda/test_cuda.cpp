// CUDA checks, run by scripts/gpu-check.sh on a machine with a GPU. Not registered with
// ctest: CI has no GPU, and these tests fail (never skip) without one. Built whenever the
// LibTorch has CUDA (make test-torch2 compiles them), so a CUDA path that stops compiling
// never lands.
#include <gtest/gtest.h>

#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include "../common/free_port.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "ddp/ddp.h"
#include "dist/dist_context.h"
#include "models/gpt.h"
#include "models/mini_resnet.h"
#include "obs/memory.h"
#include "train/grad_scaler.h"
#include "util/torch_compat.h"

using namespace ddptrain;

namespace {

class Cuda : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(torch::cuda::is_available()) << "no CUDA device: these tests need a GPU";
  }
};

const at::Device kGpu(at::kCUDA, 0);

}  // namespace

// The fused CUDA ops (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_) give
// the same scale, growth tracker, skipped steps and parameters as our CPU path.
TEST_F(Cuda, GradScalerFusedOpsMatchTheCpuPath) {
  auto run = [](at::Device dev) {
    torch::manual_seed(1);
    auto w = torch::randn({64}, torch::requires_grad()).to(dev).detach().requires_grad_(true);
    torch::optim::SGD opt({w}, torch::optim::SGDOptions(0.1));
    GradScaler scaler({true, 4.0, 2.0, 0.25, 2});
    std::vector<double> scales;
    int stepped = 0;
    for (int s = 0; s < 8; ++s) {
      w.mutable_grad().reset();
      auto loss = (w * w).sum();
      if (s == 3 || s == 6) loss = loss * std::numeric_limits<double>::infinity();
      scaler.scale(loss).backward();
      scaler.unscale(opt);
      stepped += scaler.step(opt) ? 1 : 0;
      scaler.update();
      scales.push_back(scaler.current_scale());
    }
    return std::make_tuple(scales, stepped, w.detach().cpu(), scaler.state().growth_tracker);
  };
  auto [cpu_scales, cpu_steps, cpu_w, cpu_tracker] = run(at::kCPU);
  auto [gpu_scales, gpu_steps, gpu_w, gpu_tracker] = run(kGpu);
  EXPECT_EQ(cpu_scales, gpu_scales);
  EXPECT_EQ(cpu_steps, 6);
  EXPECT_EQ(gpu_steps, cpu_steps);
  EXPECT_EQ(gpu_tracker, cpu_tracker);
  EXPECT_TRUE(torch::allclose(cpu_w, gpu_w, 1e-5, 1e-6)) << (cpu_w - gpu_w).abs().max();
}

// Autocast on CUDA: fp16 and bf16 convolutions and matmuls, fp32 loss and master weights.
TEST_F(Cuda, AutocastFp16AndBf16) {
  torch::manual_seed(2);
  MiniResNet m(MiniResNetOptions{3, 10, 0.25});
  m->to(kGpu);
  auto x = torch::randn({8, 3, 32, 32}, kGpu);
  auto y = torch::randint(0, 10, {8}, torch::TensorOptions(kGpu).dtype(at::kLong));
  for (auto dtype : {at::kHalf, at::kBFloat16}) {
    compat::AutocastGuard guard(at::kCUDA, dtype, true);
    auto logits = m->forward(x);
    EXPECT_EQ(logits.scalar_type(), dtype);
    auto loss = torch::nn::functional::cross_entropy(logits, y);
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
    loss.backward();
    EXPECT_EQ(m->fc->weight.grad().scalar_type(), at::kFloat);
    EXPECT_TRUE(torch::isfinite(m->fc->weight.grad()).all().item<bool>());
  }
}

// Recompute on CUDA restores the CUDA generator: gradients with dropout equal those of a
// plain backward (to 1e-6, not bitwise: flash attention's backward accumulates dQ with
// atomics, so even two plain runs may differ in the last bits; a wrong dropout mask would
// change them by orders of magnitude more); and the peak of allocated memory is lower.
TEST_F(Cuda, RecomputeBitwiseEqualAndLowerPeakMemory) {
  auto grads = [](bool recompute, int64_t* peak) {
    GptConfig c = gpt_preset(GptPreset::kDebug);
    c.n_layer = 6;
    c.dropout = 0.1;
    c.recompute_blocks = recompute;
    torch::manual_seed(5);
    Gpt m(c);
    m->to(kGpu);
    auto tokens = torch::randint(0, 256, {16, 64}, torch::TensorOptions(kGpu).dtype(at::kLong));
    torch::cuda::manual_seed_all(6);
    reset_peak_memory(kGpu);
    auto logits = m->forward(tokens);
    torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), tokens.reshape({-1})).backward();
    *peak = memory_stats(kGpu).peak_bytes;
    std::vector<at::Tensor> g;
    for (const auto& p : m->parameters()) g.push_back(p.grad().cpu());
    return g;
  };
  int64_t plain_peak = 0, recompute_peak = 0;
  auto plain = grads(false, &plain_peak), recomputed = grads(true, &recompute_peak);
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_TRUE(torch::allclose(plain[i], recomputed[i], 1e-5, 1e-6)) << "parameter " << i;
  std::printf("CUDA peak allocated: plain %.1f MiB, recompute %.1f MiB\n", plain_peak / 1048576.0,
              recompute_peak / 1048576.0);
  EXPECT_GT(plain_peak, 0);
  EXPECT_LT(recompute_peak, plain_peak);
}

// GPT on CUDA (scaled_dot_product_attention's fused kernels) agrees with the CPU.
TEST_F(Cuda, GptMatchesTheCpu) {
  torch::manual_seed(7);
  Gpt m(gpt_preset(GptPreset::kDebug));
  m->eval();
  torch::NoGradGuard no_grad;
  auto tokens = torch::randint(0, 256, {4, 64}, at::kLong);
  auto cpu = m->forward(tokens);
  m->to(kGpu);
  auto gpu = m->forward(tokens.to(kGpu)).cpu();
  EXPECT_TRUE(torch::allclose(cpu, gpu, 1e-3, 1e-4)) << (cpu - gpu).abs().max();
}

// NCCL: a process group of one rank on the GPU all-reduces, broadcasts and runs DDP.
TEST_F(Cuda, NcclProcessGroupAndDdp) {
  EnvContract env;
  env.master_addr = "127.0.0.1";
  env.master_port = testing_common::free_port();
  DistContext ctx(env, {"nccl", std::chrono::seconds(60)});
  ASSERT_EQ(ctx.backend_name(), "nccl");
  ASSERT_TRUE(ctx.communicates());
  std::vector<at::Tensor> t{torch::full({4}, 3.0, kGpu)};
  ctx.all_reduce_sum(t, "test all_reduce");
  EXPECT_EQ(t[0].sum().item<double>(), 12.0);
  torch::manual_seed(8);
  MiniResNet m(MiniResNetOptions{3, 10, 0.25});
  m->to(kGpu);
  DistributedDataParallel ddp(m.ptr(), ctx, {});
  EXPECT_GT(ddp.num_buckets(), 0);
  auto x = torch::randn({8, 3, 32, 32}, kGpu);
  auto y = torch::randint(0, 10, {8}, torch::TensorOptions(kGpu).dtype(at::kLong));
  torch::nn::functional::cross_entropy(m->forward(x), y).backward();
  EXPECT_GT(ddp.take_stats().allreduces, 0);
  ctx.shutdown();
}

// The loader builds batches in pinned memory for non_blocking copies.
TEST_F(Cuda, LoaderPinsBatches) {
  SyntheticDataset ds(64, DatasetShape{3, 8, 8, 10});
  LoaderOptions o{16, 2, 2, true};
  o.pin_memory = true;
  Loader loader(ds, o);
  std::vector<int64_t> idx(64);
  for (int64_t i = 0; i < 64; ++i) idx[static_cast<size_t>(i)] = i;
  loader.start(idx);
  auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->inputs.is_pinned());
  auto on_gpu = b->inputs.to(kGpu, /*non_blocking=*/true);
  EXPECT_TRUE(on_gpu.cpu().equal(b->inputs));
  loader.stop();
}
