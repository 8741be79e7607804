// Gradient clipping by the global 2-norm without a host sync: the norm and the clipping
// coefficient stay on the gradients' device, and the caller reads the norm when it logs.
//
// Note [No host sync in a step]
// A step (forward, backward, unscale, clip, optimizer) must not read a device value on the host:
// on a GPU each read (.item(), a bool of a tensor, a copy to the CPU) waits for every queued
// kernel and leaves the GPU idle while the host launches the next ones. torch's C++
// clip_grad_norm_ returns the norm as a double (a read every step); clip_grad_norm below
// returns it as a tensor, which the reporter reads at log lines only. The per-tensor norms,
// their stack and the coefficient are the ones torch::nn::utils::clip_grad_norm_ computes
// (bitwise the same gradients on CPU); on CUDA the norms come from one _foreach_norm and the
// scaling from one _foreach_mul_, as Python's clip_grad_norm_ does there.
// One exception: with the loss scaler (fp16), GradScaler::step reads its inf/NaN flag, one
// read a step, to skip the optimizer's step on the host. PyTorch's fused AdamW takes the flag
// into its kernel instead; ours would need the step counts on the device too (not built).
#pragma once

#include <vector>

#include <ATen/core/Tensor.h>

namespace ddptrain {

/// Scales the gradients of `params` so that their global 2-norm is at most max_norm (the
/// coefficient max_norm / (norm + 1e-6), at most 1, as torch.nn.utils.clip_grad_norm_), and
/// returns the norm before clipping as a 0-dim tensor on their device (undefined when no
/// parameter has a gradient).
at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm);

/// The clipping coefficient for a global norm tensor: clamp(max_norm / (norm + 1e-6), max 1).
at::Tensor clip_coefficient(const at::Tensor& norm, double max_norm);

}  // namespace ddptrain
