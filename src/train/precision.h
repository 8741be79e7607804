// Which precision a run uses, and why (logged at start, and in the metrics file). Master
// weights and optimizer state stay fp32 always; autocast runs forward and loss in the chosen
// 16-bit type.
//  - --no-use_amp: fp32.
//  - --amp_dtype fp16|bf16: that type on CUDA; on CPU bf16, and fp16 runs fp32 (no CPU
//    kernels in LibTorch 1.13), the log says so.
//  - --amp_dtype auto (the default): see Note [Precision chosen by measurement].
// The loss scaler (--grad_scaler auto) is on exactly when fp16 autocast runs; "on" forces it
// (e.g. to test it in fp32), "off" disables it.
//
// Note [Precision chosen by measurement]
// Whether bf16 pays on a CPU depends on the CPU: with native bf16 instructions (AVX512-BF16,
// AMX) oneDNN's bf16 convolutions and matmuls run faster than fp32; without them (AVX2 only)
// LibTorch emulates bf16 and autocast made GPT 10-20x slower. So on CPU `auto` measures:
// a start-up probe (obs/kernel_probe.h) times a 3x3 convolution and a matmul in fp32 and in
// bf16 on the rank's threads, and bf16 is chosen only when both run at least
// kBf16MinSpeedup times as fast as fp32 (a margin, so that noise never flips the choice on a
// CPU where the two are close). The choice is a pure function of those four rates
// (choose_precision), which every rank applies to the rates averaged over all ranks (so all
// train in the same precision), and recorded in every checkpoint, so that a resumed run keeps the precision
// it started with instead of measuring again (bitwise resume). On CUDA `auto` is bf16 where the GPU has it
// (compute capability >= 8.0), fp16 with the loss scaler otherwise. A resume on a device that lacks
// the recorded choice trains in what it has (fp16 on a CPU: fp32; bf16 on an older GPU: fp16)
// and its checkpoints keep the choice beside it (meta.json "precision_auto"), so that a run
// back on a device that has it trains in it again.
#pragma once

#include <cstdint>
#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "obs/kernel_probe.h"
#include "train/precision_options.h"

namespace ddptrain {

/// bf16 must beat fp32 by this factor, for convolution and matmul alike, to be chosen on CPU.
constexpr double kBf16MinSpeedup = 1.2;

/// The options and what a resumed checkpoint recorded: what the choice is made from.
struct PrecisionRequest : PrecisionOptions {
  std::string resumed;  // the precision recorded by the checkpoint resumed, if any
};

struct Precision {
  bool autocast = false;
  at::ScalarType dtype = at::kFloat;  // the autocast type when autocast
  bool grad_scaler = false;
  std::string why;  // one line for the log
  /// amp_dtype=auto's choice where this device could not train in it (a resumed fp16 run on a
  /// CPU trains fp32): a checkpoint keeps it, so a later resume on a device that can goes back
  /// to it (Note [Precision chosen by measurement]). "": name().
  std::string auto_choice;

  /// "fp32", "bf16" or "fp16": what forward runs in (metrics, checkpoints).
  std::string name() const;
  /// What amp_dtype=auto resumes next: auto_choice, else name().
  std::string kept_choice() const { return auto_choice.empty() ? name() : auto_choice; }
};

/// Pure: the precision for this request on this device. cuda_bf16: the GPU has bf16;
/// cpu: the measured rates (used by --amp_dtype auto on CPU).
Precision choose_precision(const PrecisionRequest& req, c10::Device device, bool cuda_bf16,
                           const CpuKernelRates& cpu);

/// The precision named by Precision::name() (a resumed checkpoint's), with the scaler rule.
Precision precision_named(const std::string& name, ScalerMode grad_scaler, const std::string& why);

}  // namespace ddptrain
