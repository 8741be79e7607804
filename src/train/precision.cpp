#include "train/precision.h"

#include "obs/logger.h"

namespace ddptrain {

Precision choose_precision(bool use_amp, const std::string& amp_dtype, const std::string& grad_scaler,
                           c10::Device device) {
  Precision p;
  if (!use_amp) {
    p.why = "fp32 (--no-use_amp)";
  } else if (device.is_cuda()) {
    p.autocast = true;
    p.dtype = amp_dtype == "bf16" ? at::kBFloat16 : at::kHalf;
    p.why = str(amp_dtype, " autocast on CUDA (forward and loss; fp32 master weights and optimizer state)");
  } else if (amp_dtype == "bf16") {
    p.autocast = true;
    p.dtype = at::kBFloat16;
    p.why = "bf16 autocast on CPU (forward and loss; fp32 master weights and optimizer state)";
  } else {
    p.why = "fp32: --use_amp with --amp_dtype fp16 has no CPU kernels; pass --amp_dtype bf16 for CPU autocast";
  }
  p.grad_scaler = grad_scaler == "on" || (grad_scaler == "auto" && p.autocast && p.dtype == at::kHalf);
  p.why += p.grad_scaler ? "; dynamic loss scaling on" : "";
  return p;
}

}  // namespace ddptrain
