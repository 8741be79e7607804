// Which precision a run uses, and why (logged at start). Master weights and optimizer state
// stay fp32 always; autocast runs forward and loss in the chosen 16-bit type.
//  - --no-use_amp: fp32.
//  - CUDA: autocast to --amp_dtype (fp16, the reference's default, or bf16).
//  - CPU: autocast to bf16 when --amp_dtype bf16; fp16 autocast has no CPU kernels in
//    LibTorch 1.13, so fp16 on CPU runs fp32 and the log says so.
// The loss scaler (--grad_scaler auto) is on exactly when fp16 autocast runs; "on" forces it
// (e.g. to test it in fp32), "off" disables it.
#pragma once

#include <string>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace ddptrain {

struct Precision {
  bool autocast = false;
  at::ScalarType dtype = at::kFloat;  // the autocast type when autocast
  bool grad_scaler = false;
  std::string why;  // one line for the log
};

Precision choose_precision(bool use_amp, const std::string& amp_dtype, const std::string& grad_scaler,
                           c10::Device device);

}  // namespace ddptrain
