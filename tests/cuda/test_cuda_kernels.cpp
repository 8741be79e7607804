// CUDA checks of ddptrain's own kernels (kernels/: the fused cross-entropy, the norms, rotary,
// SwiGLU, cuBLASLt's epilogues) against their references, run by scripts/gpu-check.sh with the
// rest of tests/cuda (one binary, ddptrain_cuda_tests).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/functional/loss.h>

#include "cuda_fixture.h"
#include "kernels/fused_cross_entropy.h"
#include "kernels/fused_layer_norm.h"
#include "kernels/fused_linear.h"
#include "kernels/fused_rotary.h"
#include "kernels/fused_swiglu.h"
#include "models/vocab_padding.h"
#include "util/torch_compat.h"

using namespace ddptrain;
using namespace ddptrain::testing_cuda;

// Note [Fused cross-entropy]: the CUDA kernels equal the CPU path (the reference the CPU tests
// compare with eager) in loss and gradient: bf16 logits of a padded vocabulary's view (rows
// 16-byte aligned: the kernels' vector loads), of an odd-width contiguous tensor (most rows
// unaligned: element by element), and fp32; the gradient written in place into the padded
// rows, as in training.
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
    // As the models give them: the output of an op whose backward needs only its inputs (the LM
    // head's GEMM; here a multiply), through real_vocab_logits' view: the backward writes the
    // gradient into the padded rows in place, and the view's backward zeroes the padding.
    auto run = [&](at::Device dev) {
      const at::Tensor leaf = full.to(dev).clone().requires_grad_();
      const at::Tensor x = real_vocab_logits(leaf.mul(1.0), 50257);
      EXPECT_TRUE(gradient_may_overwrite(x)) << "the in-place backward is the one under test";
      const auto [loss, hits] = fused_cross_entropy_and_hits(x, targets.to(dev));
      const int64_t count = hits.item<int64_t>();
      loss.backward();
      if (c.width > 50257) {
        EXPECT_EQ(leaf.grad().narrow(1, 50257, c.width - 50257).abs().max().item<double>(), 0.0)
            << "the padded columns' gradient on " << dev;
      }
      return std::make_tuple(loss.item<double>(), leaf.grad().narrow(1, 0, 50257).to(at::kCPU, at::kFloat),
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
// 4095 rows in another order), for rows of 768 (GPT-2), 1024 (the largest the kernels take)
// and 384, and rows of 100 fall back to ATen's ops on the GPU. Twice the same backward gives
// bitwise the same gradients (the partial sums are added in a fixed order).
namespace {

// layer_norm_to (rms: rms_norm_to; add: add_layer_norm_to or add_rms_norm_to, whose sum h is
// used on and has a gradient of its own, or not: h_grad false, as the final norm's after the
// last block, Note [Residual add in the next norm]) on the GPU against its CPU path: outputs
// within bf16's rounding, gradients within 1e-4 of their largest value, and the same bits on a
// second run.
void fused_norm_kernels_match_the_cpu_path(bool rms, bool add, bool h_grad = true) {
  ASSERT_TRUE(fused_layer_norm_has_cuda()) << "this build has no CUDA kernels (nvcc not found at configure)";
  const std::string op = std::string(add ? "add_" : "") + (rms ? "rms_norm_to" : "layer_norm_to");
  for (int64_t C : {768, 1024, 384, 100}) {
    SCOPED_TRACE(op + ", rows of " + std::to_string(C));
    at::manual_seed(11);
    // 4095 rows: the last block's warps past the rows (a row count not a multiple of 8) too.
    const at::Tensor x0 = at::randn({4095, C}) * 2 + 0.5, w0 = at::randn({C}), b0 = at::randn({C});
    const at::Tensor branch0 = at::randn({4095, C}).to(at::kBFloat16), dh = at::randn({4095, C}) * 0.1;
    const at::Tensor dy = at::randn({4095, C}).to(at::kBFloat16);
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
      const bool both = add && h_grad;
      torch::autograd::backward(
          both ? std::vector<at::Tensor>{y, h} : std::vector<at::Tensor>{y},
          both ? std::vector<at::Tensor>{dy.to(dev), dh.to(dev)} : std::vector<at::Tensor>{dy.to(dev)});
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
  fused_norm_kernels_match_the_cpu_path(false, true, /*h_grad=*/false);
  fused_norm_kernels_match_the_cpu_path(true, true, /*h_grad=*/false);
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

// Note [Linear epilogues in cuBLASLt]: at GPT-2 124M's sizes (batch 64 x 1024 tokens) in bf16,
// cuBLASLt takes all three epilogues (no fallback to ATen's ops) and each writes what
// lt_matmul_reference computes from the same GPU tensors, within a bf16 rounding of the largest
// value; a second call writes the same bits. In fp32 the GELU is told apart: cuBLASLt's is
// GPT-2's tanh form (the reference's), not the exact one.
namespace {

// max |got - want| and max |want|, computed on the device.
std::pair<double, double> max_diff_and_top(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor w = want.to(at::kFloat);
  return {(got.to(at::kFloat) - w).abs().max().item<double>(), w.abs().max().item<double>()};
}

void expect_within(const at::Tensor& got, const at::Tensor& want, double rel, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const auto [diff, top] = max_diff_and_top(got, want);
  std::printf("%s: max |diff| %g of %g\n", what.c_str(), diff, top);
  EXPECT_GT(top, 0) << what << ": all zeros compare nothing";
  EXPECT_LE(diff, rel * top) << what;
}

using MakeGemm = std::function<fused_linear_detail::LtGemm(std::vector<at::Tensor>&)>;

// `make` describes one epilogue GEMM into the outputs it is given (of `shapes`, in `dtype`); it
// runs on cuBLASLt twice and once through the reference. Returns the outputs: cuBLASLt's, the
// reference's.
std::pair<std::vector<at::Tensor>, std::vector<at::Tensor>> epilogue_against_reference(
    const std::string& name, at::ScalarType dtype, double rel,
    const std::vector<std::vector<int64_t>>& shapes, const MakeGemm& make) {
  auto outputs = [&] {
    std::vector<at::Tensor> v;
    for (const auto& s : shapes) v.push_back(at::full(s, 7.0, at::TensorOptions(kGpu).dtype(dtype)));
    return v;
  };
  std::vector<at::Tensor> lt = outputs(), again = outputs(), ref = outputs();
  EXPECT_TRUE(fused_linear_detail::lt_matmul(make(lt))) << name << ": cuBLASLt has no algorithm for it";
  EXPECT_TRUE(fused_linear_detail::lt_matmul(make(again))) << name;
  fused_linear_detail::lt_matmul_reference(make(ref));
  for (size_t i = 0; i < shapes.size(); ++i) {
    expect_within(lt[i], ref[i], rel, name + ", output " + std::to_string(i));
    EXPECT_TRUE(at::equal(lt[i], again[i])) << name << ", output " << i << " differs between two calls";
  }
  return {lt, ref};
}

// The three epilogues (and BGRADB on c_attn's shape) at N tokens in `dtype`, within `rel`.
void linear_epilogues_match_their_reference(int64_t N, at::ScalarType dtype, double rel) {
  ASSERT_TRUE(fused_linear_has_cuda()) << "this build has no CUDA kernels (nvcc not found at configure)";
  const int64_t C = 768, F = 3072;
  at::manual_seed(13);
  auto dev = [&](const at::Tensor& t) { return t.to(kGpu, dtype); };
  const at::Tensor x = dev(at::randn({N, C})), w_fc = dev(at::randn({F, C}) * 0.05),
                   b_fc = dev(at::randn({F}));
  const at::Tensor w_proj = dev(at::randn({C, F}) * 0.03), dy = dev(at::randn({N, C}) * 0.01);
  const at::Tensor pre = dev(at::randn({N, F}) * 2), dqkv = dev(at::randn({N, 3 * C}) * 0.01);
  const std::string at_n = " at " + std::to_string(N) + " tokens, " + c10::toString(dtype);
  const auto [fwd, fwd_ref] = epilogue_against_reference(
      "GELU_AUX_BIAS (c_fc forward)" + at_n, dtype, rel, {{N, F}, {N, F}}, [&](std::vector<at::Tensor>& o) {
        return fused_linear_detail::gelu_bias_forward(x, w_fc, b_fc, o[0], o[1]);
      });
  const auto [bwd, bwd_ref] =
      epilogue_against_reference("DGELU_BGRAD (c_proj input gradient)" + at_n, dtype, rel, {{N, F}, {F}},
                                 [&](std::vector<at::Tensor>& o) {
                                   return fused_linear_detail::dgelu_input_grad(dy, w_proj, pre, o[0], o[1]);
                                 });
  epilogue_against_reference("BGRADB (c_proj weight gradient)" + at_n, dtype, rel, {{C, F}, {C}},
                             [&](std::vector<at::Tensor>& o) {
                               return fused_linear_detail::weight_grad_with_bias(dy, pre, o[0], o[1]);
                             });
  epilogue_against_reference("BGRADB (c_attn weight gradient)" + at_n, dtype, rel, {{3 * C, C}, {3 * C}},
                             [&](std::vector<at::Tensor>& o) {
                               return fused_linear_detail::weight_grad_with_bias(dqkv, x, o[0], o[1]);
                             });
  if (dtype != at::kFloat) return;
  // The exact GELU (and its derivative) of the same pre-activation: cuBLASLt's must be nearer the
  // tanh form by far (the forms differ by up to ~5e-4 at |x| ~ 2).
  const auto [d_tanh, top] = max_diff_and_top(fwd[0], fwd_ref[0]);
  const auto [d_exact, unused] = max_diff_and_top(fwd[0], at::gelu(fwd_ref[1], "none"));
  std::printf("GELU: max |diff| from the tanh form %g, from the exact form %g (of %g)\n", d_tanh, d_exact,
              top);
  EXPECT_LT(d_tanh * 4, d_exact) << "cuBLASLt's GELU is not nearer the tanh form";
  const at::Tensor dg = dy.mm(w_proj);
  const auto [dd_tanh, dtop] = max_diff_and_top(bwd[0], at::gelu_backward(dg, pre, "tanh"));
  const auto [dd_exact, unused2] = max_diff_and_top(bwd[0], at::gelu_backward(dg, pre, "none"));
  std::printf("dGELU: max |diff| from the tanh form %g, from the exact form %g (of %g)\n", dd_tanh, dd_exact,
              dtop);
  EXPECT_LT(dd_tanh * 4, dd_exact) << "cuBLASLt's GELU derivative is not nearer the tanh form's";
}

}  // namespace

TEST_F(Cuda, LinearEpiloguesMatchTheirReferenceAtGpt2Sizes) {
  linear_epilogues_match_their_reference(64 * 1024, at::kBFloat16, 1.0 / 128);
}

// fp32 on its own, outside the lever's group (scripts/gpu-check.sh LINEAR_TESTS): --fused_linear
// auto takes the epilogues in bf16/fp16 only, so an fp32 epilogue cuBLASLt has no algorithm for
// must not turn the bf16 lever off (Note [Levers the CUDA tests vouch for]); here the GELU's form
// is told apart too.
TEST_F(Cuda, Fp32EpiloguesComputeTheTanhGelu) {
  linear_epilogues_match_their_reference(8192, at::kFloat, 1e-4);
}

// The MLP (tanh GELU: the epilogues; exact GELU: the bias gradients alone; tanh GELU through the
// ATen stand-ins of a GEMM cuBLASLt has no algorithm for) and a Linear under bf16 autocast, from
// fp32 parameters, against ATen's ops: the output and every gradient within 1/64 of its largest
// value (bf16 roundings taken in other places), and their Functions ran.
TEST_F(Cuda, GptMlpAndLinearThroughEpiloguesMatchAtenUnderAutocast) {
  ASSERT_TRUE(fused_linear_has_cuda()) << "this build has no CUDA kernels (nvcc not found at configure)";
  const int64_t B = 8, T = 1024, C = 768, F = 3072;
  at::manual_seed(14);
  const std::vector<at::Tensor> init{at::randn({B, T, C}), at::randn({F, C}) * 0.02, at::randn({F}) * 0.1,
                                     at::randn({C, F}) * 0.02, at::randn({C}) * 0.1};
  const at::Tensor dy = at::randn({B, T, C}) * 0.01, dlin = at::randn({B, T, F}) * 0.01;
  const char* what_names[] = {"MLP, tanh GELU", "MLP, exact GELU", "MLP, tanh GELU, ATen stand-ins",
                              "Linear (c_fc)"};
  for (int what = 0; what < 4; ++what) {
    const std::string name = what_names[what];
    const bool linear = what == 3, tanh = what != 1;
    auto run = [&](bool fused) {
      std::vector<at::Tensor> in;
      for (const auto& t : init) in.push_back(t.to(kGpu).requires_grad_());
      at::Tensor y;
      {
        compat::AutocastGuard autocast(at::kCUDA, at::kBFloat16, true);
        if (linear) {
          y = fused ? linear_with_epilogues(in[0], in[1], in[2]) : at::linear(in[0], in[1], in[2]);
        } else if (fused && what == 2) {
          std::vector<at::Tensor> bf;
          for (const auto& t : in) bf.push_back(t.to(at::kBFloat16));
          y = fused_linear_detail::gelu_mlp_function(bf[0], bf[1], bf[2], bf[3], bf[4],
                                                     fused_linear_detail::GemmPath::kAten);
        } else {
          y = fused ? gelu_mlp_with_epilogues(in[0], in[1], in[2], in[3], in[4], tanh)
                    : at::linear(at::gelu(at::linear(in[0], in[1], in[2]), tanh ? "tanh" : "none"), in[3],
                                 in[4]);
        }
      }
      if (fused) {
        const std::string fn = y.grad_fn()->name();
        EXPECT_NE(fn.find(tanh && !linear ? "GeluMlp" : "EpilogueLinear"), std::string::npos)
            << name << ": " << fn;
      }
      y.backward(linear ? dlin.to(kGpu) : dy.to(kGpu));
      std::vector<at::Tensor> out{y};
      for (size_t i = 0; i < (linear ? 3u : in.size()); ++i) out.push_back(in[i].grad());
      return out;
    };
    const auto fused = run(true), aten = run(false);
    const char* names[] = {"y", "dx", "dw_fc", "db_fc", "dw_proj", "db_proj"};
    for (size_t i = 0; i < fused.size(); ++i)
      expect_within(fused[i], aten[i], 1.0 / 64, name + ": " + names[i]);
  }
}

// Note [SwiGLU in one pass]: the kernels compute ATen's expressions and round where ATen's ops
// round, so on a stacked gate/up GEMM output their product and its gradient (both halves) are
// bitwise ATen's CUDA ops (silu, the product, their backward and the chunks' concatenation), in
// bf16, fp16 and fp32: at a width of 16-byte packs, at an odd one and on a start off 16 bytes
// (element by element), and on a non-contiguous input; with values up to +-90 (exp overflows).
TEST_F(Cuda, FusedSwigluIsBitwiseTheAtenOps) {
  ASSERT_TRUE(fused_swiglu_has_cuda()) << "this build has no CUDA kernels (nvcc not found at configure)";
  enum Layout { kPacked, kOdd, kOffset, kStrided };
  for (Layout layout : {kPacked, kOdd, kOffset, kStrided}) {
    for (at::ScalarType t : {at::kBFloat16, at::kHalf, at::kFloat}) {
      const int64_t F = layout == kOdd ? 13 : 2048;
      SCOPED_TRACE(std::string(c10::toString(t)) + ", layout " + std::to_string(layout));
      at::manual_seed(16);
      at::Tensor gu0 = (at::randn({4, 257, 2 * F}) * 3).to(kGpu, t);
      gu0.view(-1).narrow(0, 5, 4).copy_(at::tensor({40.0, -40.0, 90.0, -90.0}));
      if (layout == kOffset)  // the same values one element into a buffer: no 16-byte start
        gu0 = at::cat({at::zeros({1}, gu0.options()), gu0.view(-1)})
                  .narrow(0, 1, gu0.numel())
                  .view(gu0.sizes());
      if (layout == kStrided)  // a slice of wider rows
        gu0 = at::cat({gu0, gu0.narrow(-1, 0, 8)}, -1).narrow(-1, 0, 2 * F);
      const at::Tensor dy = at::randn({4, 257, F}).to(kGpu, t);
      auto run = [&](bool fused) {
        const at::Tensor gu = gu0.detach().requires_grad_();
        at::Tensor y;
        if (fused) {
          y = swiglu(gu);
          EXPECT_NE(std::string(y.grad_fn()->name()).find("SwiGluCuda"), std::string::npos)
              << y.grad_fn()->name();
        } else {
          const auto halves = gu.chunk(2, -1);
          y = at::silu(halves[0]) * halves[1];
        }
        y.backward(dy);
        return std::pair{y.detach(), gu.grad()};
      };
      const auto [y, g] = run(true);
      const auto [y_ref, g_ref] = run(false);
      EXPECT_EQ(y.scalar_type(), t);
      expect_within(y, y_ref, 1.0 / 128, "swiglu output");
      expect_within(g, g_ref, 1.0 / 128, "swiglu gradient");
      EXPECT_TRUE(at::equal(y, y_ref)) << "the output is not bitwise ATen's";
      EXPECT_TRUE(at::equal(g, g_ref)) << "the gradient is not bitwise ATen's";
    }
  }
}
