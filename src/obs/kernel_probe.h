// The CPU kernel probe: how many FLOP/s this rank's intra-op threads get from the two kernels
// that dominate training (a 3x3 convolution through oneDNN and a matrix multiply through the
// BLAS LibTorch was built with), in fp32 and optionally in bf16. Measured once at start-up:
// it is the CPU's peak for MFU (obs/mfu.h) and what --amp_dtype auto chooses from (See Note
// [Precision chosen by measurement]). Also what the GPU offers, for the same choice on CUDA.
#pragma once

#include <c10/core/Device.h>

namespace ddptrain {

/// FLOP/s of this rank's CPU threads; 0 = not measured.
struct CpuKernelRates {
  double conv_fp32 = 0, matmul_fp32 = 0;
  double conv_bf16 = 0, matmul_bf16 = 0;
};

/// Times the kernels (each warmed up, then the best of up to 5 interleaved rounds within
/// 0.4 s, so a slow emulated bf16 costs about a second at most). with_bf16: also in bf16.
CpuKernelRates probe_cpu_kernels(bool with_bf16);

/// Whether this CUDA device computes bf16 natively (compute capability >= 8.0); false on CPU.
bool cuda_has_bf16(c10::Device device);

}  // namespace ddptrain
