#include "train/precision.h"

#include "obs/logger.h"

namespace ddptrain {
namespace {

constexpr const char* kMixed = " autocast (forward and loss; fp32 master weights and optimizer state)";

Precision fp32(std::string why) {
  Precision p;
  p.why = std::move(why);
  return p;
}

Precision autocast(at::ScalarType dtype, std::string why) {
  Precision p;
  p.autocast = true;
  p.dtype = dtype;
  p.why = std::move(why);
  return p;
}

// The loss scaler: on exactly with fp16 autocast (auto), or as forced.
Precision with_scaler(Precision p, ScalerMode grad_scaler) {
  p.grad_scaler = grad_scaler == ScalerMode::kOn ||
                  (grad_scaler == ScalerMode::kAuto && p.autocast && p.dtype == at::kHalf);
  p.why += p.grad_scaler ? "; dynamic loss scaling on" : "";
  return p;
}

// See Note [Precision chosen by measurement].
Precision measured_cpu_choice(const CpuKernelRates& r) {
  if (r.conv_fp32 <= 0 || r.matmul_fp32 <= 0 || r.conv_bf16 <= 0 || r.matmul_bf16 <= 0)
    return fp32("fp32 on CPU (amp_dtype=auto: bf16 speed not measured)");
  const std::string measured =
      str("bf16 runs at ", fmt("%.2fx", r.conv_bf16 / r.conv_fp32), " the speed of fp32 for a 3x3 conv (",
          static_cast<int64_t>(r.conv_bf16 / 1e9), " vs ", static_cast<int64_t>(r.conv_fp32 / 1e9),
          " GFLOP/s) and ", fmt("%.2fx", r.matmul_bf16 / r.matmul_fp32), " for a matmul (",
          static_cast<int64_t>(r.matmul_bf16 / 1e9), " vs ", static_cast<int64_t>(r.matmul_fp32 / 1e9),
          " GFLOP/s) on this CPU");
  const bool faster =
      r.conv_bf16 >= kBf16MinSpeedup * r.conv_fp32 && r.matmul_bf16 >= kBf16MinSpeedup * r.matmul_fp32;
  if (faster)
    return autocast(at::kBFloat16, str("bf16", kMixed, " on CPU: amp_dtype=auto measured ", measured));
  return fp32(str("fp32 on CPU: amp_dtype=auto measured ", measured, ", below the ", kBf16MinSpeedup,
                  "x bf16 needs for both; amp_dtype=bf16 forces it"));
}

}  // namespace

std::string Precision::name() const {
  if (!autocast) return "fp32";
  return dtype == at::kBFloat16 ? "bf16" : "fp16";
}

Precision precision_named(const std::string& name, ScalerMode grad_scaler, const std::string& why) {
  Precision p = name == "bf16"   ? autocast(at::kBFloat16, "bf16" + std::string(kMixed))
                : name == "fp16" ? autocast(at::kHalf, "fp16" + std::string(kMixed))
                                 : fp32("fp32");
  p.why += why;
  return with_scaler(std::move(p), grad_scaler);
}

Precision choose_precision(const PrecisionRequest& req, c10::Device device, bool cuda_bf16,
                           const CpuKernelRates& cpu) {
  Precision p;
  if (!req.use_amp) {
    p = fp32("fp32 (use_amp=false)");
  } else if (req.amp_dtype == AmpDtype::kAuto && !req.resumed.empty()) {
    // The resumed run's choice, where this device computes it: the run may have moved between
    // a GPU and the CPU, or to a GPU without bf16 (each said in the log's precision line).
    if (req.resumed == "fp16" && !device.is_cuda()) {
      p = fp32(
          "fp32: the resumed run chose fp16 (amp_dtype=auto), which has no CPU kernels; its checkpoints "
          "keep fp16 for a resume on a GPU");
    } else if (req.resumed == "bf16" && device.is_cuda() && !cuda_bf16) {
      p = autocast(at::kHalf,
                   str("fp16", kMixed,
                       " on CUDA: the resumed run chose bf16 (amp_dtype=auto), which this GPU lacks; "
                       "its checkpoints keep bf16 for a resume where it runs"));
    } else {
      return precision_named(
          req.resumed, req.grad_scaler,
          ", as chosen when the resumed run started (amp_dtype=auto measures only at a fresh start)");
    }
    p.auto_choice = req.resumed;
  } else if (device.is_cuda()) {
    const bool bf16 = req.amp_dtype == AmpDtype::kBf16 || (req.amp_dtype == AmpDtype::kAuto && cuda_bf16);
    p = autocast(bf16 ? at::kBFloat16 : at::kHalf,
                 str(bf16 ? "bf16" : "fp16", kMixed, " on CUDA",
                     req.amp_dtype == AmpDtype::kAuto ? (cuda_bf16 ? " (amp_dtype=auto: the GPU has bf16)"
                                                                   : " (amp_dtype=auto: the GPU has no bf16)")
                                                      : ""));
  } else if (req.amp_dtype == AmpDtype::kBf16) {
    p = autocast(at::kBFloat16, str("bf16", kMixed, " on CPU (amp_dtype=bf16)"));
  } else if (req.amp_dtype == AmpDtype::kFp16) {
    p = fp32("fp32: fp16 autocast has no CPU kernels; set amp_dtype to bf16 or auto for CPU autocast");
  } else {
    p = measured_cpu_choice(cpu);
  }
  // A resume that trains in another precision than its checkpoint's run says so (the line named
  // only the new one).
  if (!req.resumed.empty() && p.name() != req.resumed && p.why.find("resumed run") == std::string::npos)
    p.why += str("; the resumed run trained in ", req.resumed);
  return with_scaler(std::move(p), req.grad_scaler);
}

}  // namespace ddptrain
