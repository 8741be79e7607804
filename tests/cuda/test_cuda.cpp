// CUDA checks, run by scripts/gpu-check.sh on a machine with a GPU. Not registered with
// ctest: CI has no GPU, and these tests fail (never skip) without one. Built whenever the
// LibTorch has CUDA (make test-torch2 compiles them), so a CUDA path that stops compiling
// never lands.
#include <gtest/gtest.h>

#include <torch/csrc/autograd/autograd.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <nlohmann/json.hpp>

#include "../common/free_port.h"
#include "data/datasets.h"
#include "data/loader.h"
#include "ddp/ddp.h"
#include "dist/dist_context.h"
#include "kernels/fused_cross_entropy.h"
#include "kernels/fused_layer_norm.h"
#include "kernels/fused_rotary.h"
#include "models/gpt.h"
#include "models/mini_resnet.h"
#include "obs/kernel_trace.h"
#include "obs/memory.h"
#include "optim/fused_optimizers.h"
#include "optim/grad_clip.h"
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

// Note [Fused cross-entropy]: the CUDA kernels equal the CPU path (the reference the CPU tests
// compare with eager) in loss and gradient: bf16 logits of a padded vocabulary's view (rows
// 16-byte aligned: the kernels' vector loads), of an odd-width contiguous tensor (most rows
// unaligned: element by element), and fp32.
TEST_F(Cuda, FusedCrossEntropyKernelsMatchTheCpuPath) {
  ASSERT_TRUE(fused_cross_entropy_has_cuda())
      << "this build has no CUDA kernels (nvcc not found at configure)";
  struct Case {
    at::ScalarType dtype;
    int64_t width;  // the rows' length in memory; the vocabulary is 50257
  };
  for (const Case& c : {Case{at::kBFloat16, 50304}, Case{at::kBFloat16, 50257}, Case{at::kFloat, 50304}}) {
    SCOPED_TRACE(std::string(c10::toString(c.dtype)) + " rows of " + std::to_string(c.width));
    at::manual_seed(9);
    const at::Tensor full = (at::randn({512, c.width}) * 3).to(c.dtype);
    const at::Tensor targets = at::randint(0, 50257, {512}, at::kLong);
    auto run = [&](at::Device dev) {
      at::Tensor x = full.to(dev).clone().requires_grad_();
      const auto [loss, hits] = fused_cross_entropy_and_hits(x.narrow(1, 0, 50257), targets.to(dev));
      const int64_t count = hits.item<int64_t>();
      loss.backward();
      return std::make_tuple(loss.item<double>(), x.grad().narrow(1, 0, 50257).to(at::kCPU, at::kFloat),
                             count);
    };
    // Rows whose target is their largest logit (hits), some of them tied with a later one.
    full.narrow(0, 0, 100).narrow(1, 777, 1).fill_(40);
    full.narrow(0, 50, 50).narrow(1, 3333, 1).fill_(40);
    targets.narrow(0, 0, 100).fill_(777);
    const auto [cpu_loss, cpu_grad, cpu_hits] = run(at::kCPU);
    const auto [gpu_loss, gpu_grad, gpu_hits] = run(kGpu);
    EXPECT_EQ(gpu_hits, cpu_hits) << "the accuracy's count";
    EXPECT_GE(cpu_hits, 100);
    const double grad_max = cpu_grad.abs().max().item<double>();
    std::printf(
        "fused cross-entropy, CUDA vs CPU (%s, rows of %lld): loss %.9g vs %.9g, max |grad diff| %g of %g\n",
        c10::toString(c.dtype), static_cast<long long>(c.width), gpu_loss, cpu_loss,
        (gpu_grad - cpu_grad).abs().max().item<double>(), grad_max);
    EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * cpu_loss);
    // Stored in bf16, the gradients differ by its rounding; in fp32 by the fast exponential's.
    EXPECT_LE((gpu_grad - cpu_grad).abs().max().item<double>(),
              grad_max / (c.dtype == at::kFloat ? 1e4 : 64));
  }
}

// Note [LayerNorm into the autocast dtype]: the CUDA kernels equal the CPU path (ATen's
// LayerNorm and the cast) within fp32 rounding: the bf16 output within one bf16 rounding, dx,
// dweight and dbias within 1e-4 of their largest values (the weight and bias gradients sum
// 4096 rows in another order), for rows of 768 (GPT-2), 1024 (the largest the kernels take)
// and 384, and rows of 100 fall back to ATen's ops on the GPU. Twice the same backward gives
// bitwise the same gradients (the partial sums are added in a fixed order).
namespace {

// layer_norm_to (rms: rms_norm_to; add: add_layer_norm_to or add_rms_norm_to, whose sum h is
// used on and has a gradient of its own) on the GPU against its CPU path: outputs within bf16's
// rounding, gradients within 1e-4 of their largest value, and the same bits on a second run.
void fused_norm_kernels_match_the_cpu_path(bool rms, bool add) {
  ASSERT_TRUE(fused_layer_norm_has_cuda()) << "this build has no CUDA kernels (nvcc not found at configure)";
  const std::string op = std::string(add ? "add_" : "") + (rms ? "rms_norm_to" : "layer_norm_to");
  for (int64_t C : {768, 1024, 384, 100}) {
    SCOPED_TRACE(op + ", rows of " + std::to_string(C));
    at::manual_seed(11);
    const at::Tensor x0 = at::randn({4096, C}) * 2 + 0.5, w0 = at::randn({C}), b0 = at::randn({C});
    const at::Tensor branch0 = at::randn({4096, C}).to(at::kBFloat16), dh = at::randn({4096, C}) * 0.1;
    const at::Tensor dy = at::randn({4096, C}).to(at::kBFloat16);
    auto run = [&](at::Device dev) {
      std::vector<at::Tensor> in{x0.to(dev).requires_grad_(), w0.to(dev).requires_grad_()};
      if (!rms) in.push_back(b0.to(dev).requires_grad_());
      if (add) in.push_back(branch0.to(dev).requires_grad_());
      at::Tensor h, y;
      if (add)
        std::tie(h, y) = rms ? add_rms_norm_to(in[0], in.back(), in[1], 1e-6, at::kBFloat16)
                             : add_layer_norm_to(in[0], in.back(), in[1], in[2], 1e-5, at::kBFloat16);
      else
        y = rms ? rms_norm_to(in[0], in[1], 1e-6, at::kBFloat16)
                : layer_norm_to(in[0], in[1], in[2], 1e-5, at::kBFloat16);
      if (dev.is_cuda() && C % 128 == 0) {  // rows the kernels take: they ran, not ATen's ops
        const std::string fn = y.grad_fn()->name();
        EXPECT_NE(fn.find(add ? "AddNormTo" : rms ? "RmsNormTo" : "LayerNormTo"), std::string::npos) << fn;
      }
      torch::autograd::backward(
          add ? std::vector<at::Tensor>{y, h} : std::vector<at::Tensor>{y},
          add ? std::vector<at::Tensor>{dy.to(dev), dh.to(dev)} : std::vector<at::Tensor>{dy.to(dev)});
      std::vector<at::Tensor> out{y.to(at::kCPU, at::kFloat)};
      for (const auto& t : in) out.push_back(t.grad().to(at::kCPU, at::kFloat));
      if (add) out.push_back(h.to(at::kCPU));
      return out;
    };
    const auto cpu = run(at::kCPU), gpu = run(kGpu), again = run(kGpu);
    std::vector<std::string> names{"y", "dx", "dweight"};
    if (!rms) names.push_back("dbias");
    if (add) names.insert(names.end(), {"dbranch", "h"});
    ASSERT_EQ(names.size(), cpu.size());
    if (add) {
      EXPECT_TRUE(at::equal(gpu.back(), cpu.back())) << "the sum h: fp32 adds, the same bits";
    }
    for (size_t i = 0; i < cpu.size(); ++i) {
      const double top = cpu[i].abs().max().item<double>(),
                   diff = (gpu[i] - cpu[i]).abs().max().item<double>();
      std::printf("%s rows of %lld, CUDA vs CPU: %s max |diff| %g of %g\n", op.c_str(),
                  static_cast<long long>(C), names[i].c_str(), diff, top);
      // y and the branch's gradient are bf16: within its rounding (a dx rounding the other way).
      EXPECT_LE(diff, names[i] == "y" || names[i] == "dbranch" ? top / 128 : 1e-4 * top) << names[i];
      EXPECT_TRUE(at::equal(gpu[i], again[i])) << names[i] << " differs between two runs";
    }
  }
}

}  // namespace

TEST_F(Cuda, FusedLayerNormKernelsMatchTheCpuPath) { fused_norm_kernels_match_the_cpu_path(false, false); }

TEST_F(Cuda, FusedRmsNormKernelsMatchTheCpuPath) { fused_norm_kernels_match_the_cpu_path(true, false); }

TEST_F(Cuda, FusedAddAndNormKernelsMatchTheCpuPath) {
  fused_norm_kernels_match_the_cpu_path(false, true);
  fused_norm_kernels_match_the_cpu_path(true, true);
}

// Note [Rotary in one pass]: the kernel rounds each product and sum as the ATen ops do, so on
// a query laid out as Llama's (a transposed view into the stacked q/k/v output) its output and
// its gradient are bitwise the CPU's ATen ops, in bf16, fp16 and fp32.
TEST_F(Cuda, FusedRotaryIsBitwiseTheAtenOps) {
  ASSERT_TRUE(fused_rotary_has_cuda()) << "this build has no CUDA kernels (nvcc not found at configure)";
  const int64_t B = 3, T = 37, H = 4, D = 64;
  at::manual_seed(12);
  const at::Tensor inv_freq = 1.0 / at::pow(10000.0, at::arange(0, D, 2, at::kFloat) / D);
  const at::Tensor freqs = at::outer(at::arange(T, at::kFloat), inv_freq), emb = at::cat({freqs, freqs}, -1);
  const at::Tensor cos = emb.cos(), sin = emb.sin();
  for (at::ScalarType t : {at::kBFloat16, at::kHalf, at::kFloat}) {
    SCOPED_TRACE(c10::toString(t));
    const at::Tensor qkv = (at::randn({B, T, 3 * H * D}) * 3).to(t), dy = at::randn({B, H, T, D}).to(t);
    auto run = [&](at::Device dev) {
      const at::Tensor leaf = qkv.to(dev).requires_grad_();
      const at::Tensor q = leaf.narrow(-1, H * D, H * D).view({B, T, H, D}).transpose(1, 2);
      const at::Tensor y = rotary(q, cos.to(dev), sin.to(dev));
      if (dev.is_cuda()) {  // the kernel ran, not ATen's ops
        EXPECT_NE(std::string(y.grad_fn()->name()).find("RotaryCuda"), std::string::npos)
            << y.grad_fn()->name();
      }
      y.backward(dy.to(dev));
      return std::pair{y.cpu(), leaf.grad().cpu()};
    };
    const auto [y_cpu, g_cpu] = run(at::kCPU);
    const auto [y_gpu, g_gpu] = run(kGpu);
    EXPECT_EQ(y_gpu.scalar_type(), t);
    EXPECT_TRUE(at::equal(y_gpu, y_cpu)) << "max |diff| " << (y_gpu - y_cpu).abs().max().item<double>();
    EXPECT_TRUE(at::equal(g_gpu, g_cpu)) << "max |diff| " << (g_gpu - g_cpu).abs().max().item<double>();
  }
}
