// The precision a run trains in: a pure function of the request, the device and the measured
// CPU kernel rates (Note [Precision chosen by measurement]), and the probe that measures them.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <ATen/ATen.h>
#include <torch/version.h>

#include "obs/kernel_probe.h"
#include "train/precision.h"

using namespace ddptrain;

namespace {

const c10::Device kCpu{c10::kCPU};
const c10::Device kCuda{c10::kCUDA, 0};

// Rates where bf16 runs at conv_x and matmul_x the speed of fp32 (fp32: 100 and 80 GFLOP/s).
CpuKernelRates rates(double conv_x, double matmul_x) {
  return {100e9, 80e9, conv_x * 100e9, matmul_x * 80e9};
}

Precision cpu_auto(const CpuKernelRates& r) { return choose_precision({}, kCpu, false, r); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(Precision, CpuAutoChoosesBf16OnlyWhereBothKernelsAreFaster) {
  const Precision fast = cpu_auto(rates(2.0, 3.0));
  EXPECT_TRUE(fast.autocast);
  EXPECT_EQ(fast.dtype, at::kBFloat16);
  EXPECT_EQ(fast.name(), "bf16");
  EXPECT_FALSE(fast.grad_scaler);
  EXPECT_TRUE(contains(fast.why, "2.00x")) << fast.why;
  EXPECT_TRUE(contains(fast.why, "3.00x")) << fast.why;
  EXPECT_TRUE(contains(fast.why, "200 vs 100 GFLOP/s")) << fast.why;

  // An AVX2 CPU without bf16 instructions: emulated bf16 is 10-20x slower.
  const Precision slow = cpu_auto(rates(0.1, 0.05));
  EXPECT_FALSE(slow.autocast);
  EXPECT_EQ(slow.name(), "fp32");
  EXPECT_TRUE(contains(slow.why, "0.10x")) << slow.why;
  EXPECT_TRUE(contains(slow.why, "amp_dtype=bf16 forces it")) << slow.why;

  // One kernel faster is not enough: a model is convolutions or matmuls, and we cannot know which.
  EXPECT_EQ(cpu_auto(rates(3.0, 0.5)).name(), "fp32");
  EXPECT_EQ(cpu_auto(rates(0.5, 3.0)).name(), "fp32");
}

TEST(Precision, CpuAutoNeedsTheMarginSoNoiseCannotFlipIt) {
  EXPECT_EQ(cpu_auto(rates(kBf16MinSpeedup, kBf16MinSpeedup)).name(), "bf16");
  EXPECT_EQ(cpu_auto(rates(kBf16MinSpeedup * 0.99, 2.0)).name(), "fp32");
  EXPECT_EQ(cpu_auto(rates(1.05, 1.05)).name(), "fp32");
  // Not measured (a zero rate): fp32, and the log says why.
  const Precision unmeasured = cpu_auto(CpuKernelRates{100e9, 80e9, 0, 0});
  EXPECT_EQ(unmeasured.name(), "fp32");
  EXPECT_TRUE(contains(unmeasured.why, "not measured")) << unmeasured.why;
}

TEST(Precision, ExplicitRequestsWinOverTheMeasurement) {
  PrecisionRequest off;
  off.use_amp = false;
  EXPECT_EQ(choose_precision(off, kCpu, false, rates(5, 5)).name(), "fp32");
  EXPECT_EQ(choose_precision(off, kCuda, true, {}).name(), "fp32");

  PrecisionRequest bf16;
  bf16.amp_dtype = AmpDtype::kBf16;
  EXPECT_EQ(choose_precision(bf16, kCpu, false, rates(0.1, 0.1)).name(), "bf16");  // forced, even where slow

  PrecisionRequest fp16;
  fp16.amp_dtype = AmpDtype::kFp16;
  const Precision cpu_fp16 = choose_precision(fp16, kCpu, false, rates(5, 5));
  EXPECT_EQ(cpu_fp16.name(), "fp32");  // no fp16 CPU kernels
  EXPECT_TRUE(contains(cpu_fp16.why, "no CPU kernels")) << cpu_fp16.why;

  PrecisionRequest forced_scaler;
  forced_scaler.use_amp = false;
  forced_scaler.grad_scaler = ScalerMode::kOn;
  EXPECT_TRUE(choose_precision(forced_scaler, kCpu, false, {}).grad_scaler);
}

TEST(Precision, CudaAutoIsBf16WhereTheGpuHasItElseFp16WithTheScaler) {
  const Precision ampere = choose_precision({}, kCuda, true, {});
  EXPECT_EQ(ampere.name(), "bf16");
  EXPECT_FALSE(ampere.grad_scaler);
  const Precision volta = choose_precision({}, kCuda, false, {});
  EXPECT_EQ(volta.name(), "fp16");
  EXPECT_TRUE(volta.grad_scaler);
  EXPECT_TRUE(contains(volta.why, "no bf16")) << volta.why;
  PrecisionRequest fp16;
  fp16.amp_dtype = AmpDtype::kFp16;
  EXPECT_EQ(choose_precision(fp16, kCuda, true, {}).name(), "fp16");
  PrecisionRequest no_scaler = fp16;
  no_scaler.grad_scaler = ScalerMode::kOff;
  EXPECT_FALSE(choose_precision(no_scaler, kCuda, true, {}).grad_scaler);
}

TEST(Precision, AResumedRunKeepsThePrecisionItStartedWith) {
  PrecisionRequest resumed;
  resumed.resumed = "bf16";
  // The probe now says bf16 is slow (another machine, a noisy start): the run keeps bf16.
  const Precision p = choose_precision(resumed, kCpu, false, rates(0.1, 0.1));
  EXPECT_EQ(p.name(), "bf16");
  EXPECT_TRUE(contains(p.why, "resumed")) << p.why;
  resumed.resumed = "fp32";
  EXPECT_EQ(choose_precision(resumed, kCpu, false, rates(5, 5)).name(), "fp32");
  resumed.resumed = "fp16";
  EXPECT_TRUE(choose_precision(resumed, kCuda, true, {}).grad_scaler);
  // Where the resumed precision has no kernels on this device, the device's rule: fp16 on the
  // CPU trains in fp32, bf16 on a GPU without it in fp16 with the scaler; both said.
  const Precision on_cpu = choose_precision(resumed, kCpu, false, rates(5, 5));
  EXPECT_EQ(on_cpu.name(), "fp32");
  EXPECT_FALSE(on_cpu.grad_scaler);
  EXPECT_TRUE(contains(on_cpu.why, "resumed run chose fp16")) << on_cpu.why;
  // Its checkpoints keep fp16 beside the fp32 it trained in: back on a GPU, it is fp16 again
  // (it stayed fp32 there: the checkpoint had recorded only the fallback).
  EXPECT_EQ(on_cpu.kept_choice(), "fp16");
  resumed.resumed = on_cpu.kept_choice();
  EXPECT_EQ(choose_precision(resumed, kCuda, true, {}).name(), "fp16");
  EXPECT_EQ(choose_precision(resumed, kCuda, true, {}).auto_choice, "") << "trains in its choice";
  resumed.resumed = "bf16";
  const Precision on_volta = choose_precision(resumed, kCuda, false, {});
  EXPECT_EQ(on_volta.name(), "fp16");
  EXPECT_TRUE(on_volta.grad_scaler);
  EXPECT_TRUE(contains(on_volta.why, "resumed run chose bf16")) << on_volta.why;
  EXPECT_EQ(on_volta.kept_choice(), "bf16");
  EXPECT_EQ(choose_precision(resumed, kCuda, true, {}).name(), "bf16");
  // An explicit request still wins over what the checkpoint recorded, and says the change (the
  // line named only the new precision).
  resumed.amp_dtype = AmpDtype::kBf16;
  resumed.resumed = "fp32";
  const Precision changed = choose_precision(resumed, kCpu, false, {});
  EXPECT_EQ(changed.name(), "bf16");
  EXPECT_TRUE(contains(changed.why, "the resumed run trained in fp32")) << changed.why;
  resumed.use_amp = false;
  resumed.resumed = "bf16";
  EXPECT_TRUE(contains(choose_precision(resumed, kCpu, false, {}).why, "the resumed run trained in bf16"));
  resumed.resumed = "fp32";
  EXPECT_FALSE(contains(choose_precision(resumed, kCpu, false, {}).why, "resumed")) << "no change, no word";
}

TEST(KernelProbe, MeasuresEveryKernelAndLeavesTheGlobalGeneratorAlone) {
  at::manual_seed(7);
  const at::Tensor expected = at::randn({4});
  at::manual_seed(7);
  const CpuKernelRates r = probe_cpu_kernels(/*with_bf16=*/true);
  EXPECT_TRUE(at::equal(at::randn({4}), expected)) << "the probe drew from the global generator";
  std::printf("probe on %d threads: conv fp32 %.1f bf16 %.1f, matmul fp32 %.1f bf16 %.1f GFLOP/s\n",
              at::get_num_threads(), r.conv_fp32 / 1e9, r.conv_bf16 / 1e9, r.matmul_fp32 / 1e9,
              r.matmul_bf16 / 1e9);
  for (double v : {r.conv_fp32, r.matmul_fp32, r.conv_bf16, r.matmul_bf16}) EXPECT_GT(v, 0.0);
  const CpuKernelRates fp32_only = probe_cpu_kernels(false);
  EXPECT_GT(fp32_only.conv_fp32, 0.0);
  EXPECT_EQ(fp32_only.conv_bf16, 0.0);
  EXPECT_EQ(fp32_only.matmul_bf16, 0.0);
  EXPECT_FALSE(cuda_has_bf16(kCpu));
}

// Debian's LibTorch calls the system's libblas.so.3, which a fresh Debian machine points at the
// reference BLAS (matmuls 12-20x slower); scripts/install_deps.sh debian points it at
// OpenBLAS. pip's LibTorch has MKL inside and maps no libblas.so.3 at all.
TEST(FastKernels, MatmulsRunOnARealBlasNotTheReferenceOne) {
  at::mm(at::ones({64, 64}), at::ones({64, 64}));
  std::ifstream maps("/proc/self/maps");
  std::string blas;
  for (std::string line; std::getline(maps, line);)
    if (line.find("libblas.so") != std::string::npos || line.find("libopenblas") != std::string::npos)
      blas = line.substr(line.find('/'));
  std::printf("LibTorch %s; system BLAS mapped: %s\n", TORCH_VERSION, blas.empty() ? "none" : blas.c_str());
  if (TORCH_VERSION_MAJOR >= 2) {
    EXPECT_TRUE(blas.empty() || blas.find("openblas") != std::string::npos) << blas;
  } else {
    ASSERT_FALSE(blas.empty()) << "Debian's LibTorch 1.13 should call libblas.so.3";
    EXPECT_NE(blas.find("openblas"), std::string::npos)
        << blas << " is not OpenBLAS: run scripts/install_deps.sh debian";
  }
}
