#include "optim/grad_clip.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "util/torch_compat.h"

namespace ddptrain {

at::Tensor clip_coefficient(const at::Tensor& norm, double max_norm) {
  // Python's `max_norm / (total_norm + 1e-6)` is Tensor.__rtruediv__: the reciprocal times
  // max_norm (C++'s Scalar / Tensor divides, which differs in the last bit for some max_norm).
  return at::clamp_max((norm + 1e-6).reciprocal() * max_norm, 1.0);
}

at::Tensor clip_grad_norm(const std::vector<at::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return {};
  std::vector<at::Tensor> norms;
  if (grads.front().is_cuda()) {
    norms = at::_foreach_norm(grads, 2);
  } else {
    for (const auto& g : grads) norms.push_back(g.norm(2));
  }
  const at::Tensor total = norms.size() == 1 ? norms[0] : at::stack(norms).norm(2);
  compat::foreach_mul_(grads, clip_coefficient(total, max_norm));
  return total;
}

}  // namespace ddptrain
