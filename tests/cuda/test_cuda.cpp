// CUDA checks, run by scripts/gpu-check.sh on a machine with a GPU. Not registered with
// ctest: CI has no GPU, and these tests fail (never skip) without one. Built whenever the
// LibTorch has CUDA (make test-torch2 compiles them), so a CUDA path that stops compiling
// never lands.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <tuple>

#include <unistd.h>

#include <ATen/SDPBackend.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <nlohmann/json.hpp>

#include "../common/free_port.h"
#include "checkpoint/checkpoint.h"
#include "cuda_fixture.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "ddp/ddp.h"
#include "dist/dist_context.h"
#include "kernels/fused_cross_entropy.h"
#include "models/gpt.h"
#include "models/mini_resnet.h"
#include "obs/kernel_trace.h"
#include "obs/memory.h"
#include "optim/fused_optimizers.h"
#include "optim/grad_clip.h"
#include "train/deterministic.h"
#include "train/grad_scaler.h"
#include "util/env.h"
#include "util/torch_compat.h"

using namespace ddptrain;

using namespace ddptrain::testing_cuda;

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

// Grouped-query attention (Llama's key/value heads shared by groups of query heads) goes to a
// fused kernel with the heads as they are, not to the math fallback, and computes what the
// key/value heads repeated compute (compat::causal_attention).
TEST_F(Cuda, GroupedQueryAttentionTakesAFusedKernel) {
  auto opts = torch::TensorOptions(kGpu).dtype(at::kBFloat16);
  torch::manual_seed(13);
  auto q = torch::randn({4, 12, 1024, 64}, opts), k = torch::randn({4, 4, 1024, 64}, opts),
       v = torch::randn_like(k);
  const int64_t chosen = at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true, /*scale=*/{},
                                               /*enable_gqa=*/true);
  EXPECT_NE(chosen, static_cast<int64_t>(at::SDPBackend::math)) << "backend " << chosen;
  auto grads = [&](bool repeat) {
    auto qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(), vg = v.detach().requires_grad_();
    auto y = repeat
                 ? compat::causal_attention(qg, kg.repeat_interleave(3, 1), vg.repeat_interleave(3, 1), 0.0)
                 : compat::causal_attention(qg, kg, vg, 0.0);
    y.backward(torch::ones_like(y));
    std::vector<at::Tensor> out{y.detach(), qg.grad(), kg.grad(), vg.grad()};
    for (auto& t : out) t = t.to(at::kFloat);
    return out;
  };
  const auto grouped = grads(false), repeated = grads(true);
  for (size_t i = 0; i < grouped.size(); ++i)  // bf16 sums in another order: a bf16 ulp of the largest
    EXPECT_TRUE(torch::allclose(grouped[i], repeated[i], 2e-2, 2e-2 * repeated[i].abs().max().item<double>()))
        << "output/dq/dk/dv " << i << ": " << (grouped[i] - repeated[i]).abs().max();
}

// Note [Deterministic GPU runs]: deterministic algorithms for one test, as --deterministic sets
// them for a run, and back after it. LibTorch reads CUBLAS_WORKSPACE_CONFIG at the process's
// first GEMM, so the binary must start with it (scripts/gpu-check.sh runs it so).
class CudaDeterministic : public Cuda {
 protected:
  void SetUp() override {
    Cuda::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    if (!env::get("CUBLAS_WORKSPACE_CONFIG"))
      GTEST_SKIP() << "run this binary with CUBLAS_WORKSPACE_CONFIG=:4096:8 (scripts/gpu-check.sh does)";
    use_deterministic_algorithms();
  }
  void TearDown() override {
    at::globalContext().setDeterministicAlgorithms(false, false);
    at::globalContext().setDeterministicCuDNN(false);
  }
};

// The parameter gradients of one forward and backward of `m` on `x` under bf16 autocast.
template <typename Module, typename Loss>
std::vector<at::Tensor> bf16_grads(Module& m, const at::Tensor& x, Loss loss) {
  m->zero_grad();
  at::Tensor l;
  {
    compat::AutocastGuard autocast(at::kCUDA, at::kBFloat16, true);
    l = loss(m->forward(x));
  }
  l.backward();
  std::vector<at::Tensor> g;
  for (const auto& p : m->parameters()) g.push_back(p.grad().clone());
  return g;
}

void expect_bitwise(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << what << ": parameter " << i;
}

// SDPA leaves cuDNN's attention (its backward is not deterministic) for flash attention at
// GPT-2's attention shapes, and its backward repeats bitwise.
TEST_F(CudaDeterministic, AttentionTakesFlashAndRepeatsBitwise) {
  auto opts = torch::TensorOptions(kGpu).dtype(at::kBFloat16);
  torch::manual_seed(11);
  auto q = torch::randn({4, 12, 1024, 64}, opts), k = torch::randn_like(q), v = torch::randn_like(q);
  const int64_t chosen = at::_fused_sdp_choice(q, k, v, {}, 0.0, /*is_causal=*/true);
  EXPECT_EQ(chosen, static_cast<int64_t>(at::SDPBackend::flash_attention));
  auto grads = [&] {
    auto qg = q.detach().requires_grad_(), kg = k.detach().requires_grad_(), vg = v.detach().requires_grad_();
    auto y = compat::causal_attention(qg, kg, vg, 0.0);
    y.backward(torch::ones_like(y));
    return std::vector<at::Tensor>{qg.grad(), kg.grad(), vg.grad()};
  };
  expect_bitwise(grads(), grads(), "attention");
}

// GPT with ddptrain's CUDA kernels (the fused norms at a width they take, cuBLASLt's
// epilogues, the fused loss) and MiniResNet (cuDNN's convolutions and batch norm) run under
// deterministic algorithms without an error, and two backward passes give the same bits.
TEST_F(CudaDeterministic, GptAndMiniResNetRepeatBitwise) {
  GptConfig c = gpt_preset(GptPreset::kDebug);
  c.n_embd = 128;  // the norm kernels' rows: a multiple of 128 (2 heads of 64)
  c.gelu_tanh = true;
  c.fused_norm = FusedNorm::kAuto;
  c.fused_linear = FusedLinear::kAuto;
  torch::manual_seed(12);
  Gpt gpt(c);
  gpt->to(kGpu);
  auto tokens = torch::randint(0, 256, {8, 64}, torch::TensorOptions(kGpu).dtype(at::kLong));
  auto lm_loss = [&](const at::Tensor& logits) {
    return fused_cross_entropy(logits.reshape({-1, 256}), tokens.reshape({-1}));
  };
  expect_bitwise(bf16_grads(gpt, tokens, lm_loss), bf16_grads(gpt, tokens, lm_loss), "gpt");

  MiniResNet net(MiniResNetOptions{3, 10, 0.25});
  net->to(kGpu);
  auto x = torch::randn({16, 3, 32, 32}, kGpu);
  auto y = torch::randint(0, 10, {16}, torch::TensorOptions(kGpu).dtype(at::kLong));
  auto cls_loss = [&](const at::Tensor& logits) { return torch::nn::functional::cross_entropy(logits, y); };
  expect_bitwise(bf16_grads(net, x, cls_loss), bf16_grads(net, x, cls_loss), "mini_resnet");
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

// --gradient_as_bucket_view, which every GPT and Llama run of the GPU check takes: the
// gradients are views of NCCL's buckets and fused AdamW steps them in place. Three steps train
// bitwise as with copies of the buckets (world 1: the all-reduce sums one rank's).
TEST_F(Cuda, GradientsAsBucketViewsStepAsCopiesUnderFusedAdamW) {
  EnvContract env;
  env.master_addr = "127.0.0.1";
  env.master_port = testing_common::free_port();
  DistContext ctx(env, {"nccl", std::chrono::seconds(60)});
  // cuDNN's deterministic convolutions: the two arms may differ in nothing but the views.
  const bool was_deterministic = at::globalContext().deterministicCuDNN();
  at::globalContext().setDeterministicCuDNN(true);
  torch::manual_seed(9);
  const auto x = torch::randn({8, 3, 32, 32}, kGpu);
  const auto y = torch::randint(0, 10, {8}, torch::TensorOptions(kGpu).dtype(at::kLong));
  std::vector<std::vector<at::Tensor>> params;
  for (const bool views : {false, true}) {
    torch::manual_seed(8);
    MiniResNet m(MiniResNetOptions{3, 10, 0.25});
    m->to(kGpu);
    DdpSetup setup;
    setup.reducer.gradient_as_bucket_view = views;
    DistributedDataParallel ddp(m.ptr(), ctx, setup);
    FusedAdamW opt(m->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
    for (int step = 0; step < 3; ++step) {
      for (auto& p : m->parameters()) p.mutable_grad().reset();
      torch::nn::functional::cross_entropy(m->forward(x), y).backward();
      opt.step();
    }
    std::vector<at::Tensor> out;
    for (const auto& p : m->parameters()) out.push_back(p.detach().cpu());
    params.push_back(out);
  }
  ASSERT_EQ(params[0].size(), params[1].size());
  for (size_t i = 0; i < params[0].size(); ++i) EXPECT_TRUE(at::equal(params[0][i], params[1][i])) << i;
  at::globalContext().setDeterministicCuDNN(was_deterministic);
  ctx.shutdown();
}

// Note [Waiting on NCCL]: a wait makes the stream wait, not the host. With a quarter second of GPU
// work queued ahead of an all-reduce, DistContext::wait returns before the all-reduce has
// completed (given a timeout, c10d's wait held the host until it had: every step's backward
// then synced the host); the value read afterwards on the stream is the reduced one.
TEST_F(Cuda, ANcclWaitLeavesTheHostFree) {
  EnvContract env;
  env.master_addr = "127.0.0.1";
  env.master_port = testing_common::free_port();
  DistContext ctx(env, {"nccl", std::chrono::seconds(60)});
  at::Tensor a = torch::randn({4096, 4096}, kGpu);
  const at::Tensor b = torch::randn({4096, 4096}, kGpu).div_(64.0);  // products stay O(1)
  for (int i = 0; i < 100; ++i) a = at::matmul(a, b);                // fp32: 100 x 0.14 TFLOP queued
  std::vector<at::Tensor> t{a.abs().sum().reshape({1})};
  auto work = ctx.all_reduce_sum_async(t, "test all_reduce behind queued work");
  ctx.wait(work, "test all_reduce behind queued work");
  EXPECT_FALSE(work->isCompleted()) << "the host waited for the all-reduce";
  const double reduced = t[0].item<double>();  // on the stream: after the all-reduce
  EXPECT_TRUE(work->isCompleted());
  EXPECT_TRUE(std::isfinite(reduced));
  EXPECT_EQ(reduced, a.abs().sum().item<double>()) << "a world of one sums to its own value";
  ctx.shutdown();
}

// A checkpoint holds the GPU generator's state too (dropout on the GPU draws from it): after a
// load, the GPU draws what it drew after the save.
TEST_F(Cuda, ACheckpointRestoresTheGpuGenerator) {
  EnvContract env;
  env.master_addr = "127.0.0.1";
  env.master_port = testing_common::free_port();
  DistContext ctx(env, {"nccl", std::chrono::seconds(60)});
  ASSERT_TRUE(ctx.device().is_cuda());
  const std::string root = ::testing::TempDir() + "gpu_rng_" + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  torch::manual_seed(9);
  const std::string dir = save_checkpoint(ctx, root, "step_00000001", {}, CheckpointMeta{}, "{}", {});
  ASSERT_TRUE(std::filesystem::exists(dir + "/cuda_rng_states.bin"));
  const at::Tensor after_save = torch::rand({8}, kGpu);
  torch::manual_seed(10);  // anything else in between
  load_checkpoint(dir, ctx, std::vector<CheckpointPart>{});
  EXPECT_TRUE(torch::rand({8}, kGpu).equal(after_save));
  ctx.shutdown();
  std::filesystem::remove_all(root);
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

namespace {

std::vector<at::Tensor> gpu_params(uint64_t seed) {
  at::manual_seed(seed);
  std::vector<at::Tensor> out;
  for (auto shape : std::vector<std::vector<int64_t>>{{257, 33}, {33}, {64, 64}, {1}})
    out.push_back(at::randn(shape, kGpu).requires_grad_());
  return out;
}

std::vector<torch::optim::OptimizerParamGroup> decay_groups(const std::vector<at::Tensor>& ps) {
  std::vector<at::Tensor> decay, none;
  for (const auto& p : ps) (p.dim() >= 2 ? decay : none).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> g;
  g.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                            torch::optim::AdamWOptions(1e-3).weight_decay(0.1)));
  g.emplace_back(
      none, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-3).weight_decay(0)));
  return g;
}

}  // namespace

// Note [Fused optimizers] on the GPU: FusedAdamW (ATen's CUDA kernel, one launch per group)
// steps as torch::optim::AdamW does on the same GPU within the CPU tests' bound (1e-5, 20 steps).
TEST_F(Cuda, FusedAdamWMatchesTheLoopOnTheGpu) {
  const auto a = gpu_params(1);
  std::vector<at::Tensor> b;
  for (const auto& p : a) b.push_back(p.detach().clone().requires_grad_());
  torch::optim::AdamW loop(decay_groups(a), torch::optim::AdamWOptions(1e-3));
  FusedAdamW fused(decay_groups(b), torch::optim::AdamWOptions(1e-3));
  for (int s = 0; s < 20; ++s) {
    for (size_t i = 0; i < a.size(); ++i) {
      const at::Tensor g = at::randn(a[i].sizes(), kGpu);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    loop.step();
    fused.step();
  }
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  std::printf("FusedAdamW vs the loop on the GPU after 20 steps: max |diff| %g\n", d);
  EXPECT_LE(d, 1e-5);
}

// Note [No host sync in a step] on the GPU: clipping and the fused optimizer's step under
// c10's sync debug mode set to error (any .item(), blocking copy or synchronize throws).
TEST_F(Cuda, ClippingAndTheFusedStepMakeNoHostSync) {
  const auto ps = gpu_params(2);
  FusedAdamW opt(decay_groups(ps), torch::optim::AdamWOptions(1e-3));
  auto step = [&] {
    for (auto& p : ps) p.mutable_grad() = at::randn(p.sizes(), kGpu);
    const at::Tensor norm = clip_grad_norm(ps, 0.5);
    opt.step();
    return norm;
  };
  step();  // the state's first allocation
  auto& warnings = c10::cuda::warning_state();
  warnings.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  at::Tensor norm;
  EXPECT_NO_THROW(for (int i = 0; i < 3; ++i) norm = step());
  EXPECT_THROW(norm.item<double>(), c10::Error)
      << "the sync debug mode is not on: the check would pass silently";
  warnings.set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  EXPECT_GT(norm.item<double>(), 0.5);
}

// obs/kernel_trace.h on the GPU: LibTorch's profiler records the kernels (what
// scripts/profile_table.py sums in the GPU check).
TEST_F(Cuda, KernelTraceRecordsGpuKernels) {
  const std::string path = (std::filesystem::temp_directory_path() / "ddptrain_cuda_kernels.json").string();
  KernelTrace trace;
  std::string why;
  ASSERT_TRUE(trace.start(/*cuda=*/true, &why)) << why;
  const at::Tensor x = at::randn({512, 512}, kGpu);
  const at::Tensor y = at::mm(x, x).relu().sum();
  EXPECT_TRUE(y.defined());
  torch::cuda::synchronize();
  ASSERT_TRUE(trace.stop_and_save(path, &why)) << why;
  std::ifstream in(path);
  const auto doc = nlohmann::json::parse(in);
  int kernels = 0;
  for (const auto& e : doc.at("traceEvents"))
    if (e.value("cat", "") == "kernel") ++kernels;
  EXPECT_GE(kernels, 3) << "no GPU kernels in the trace";
  std::filesystem::remove(path);
}
