// A build without ddptrain's CUDA kernels: layer_norm_to runs ATen's ops on every device
// (Note [LayerNorm into the autocast dtype]; kernels/fused_layer_norm_cuda.cu replaces this
// file where they are compiled).
#include <c10/util/Exception.h>

#include "kernels/fused_layer_norm.h"

namespace ddptrain {

bool fused_layer_norm_has_cuda() { return false; }

namespace fused_ln_detail {

void forward_cuda(const at::Tensor&, const at::Tensor&, const at::Tensor&, double, at::Tensor&, at::Tensor&,
                  at::Tensor&, const at::Tensor&, at::Tensor&) {
  TORCH_CHECK(false, "layer_norm_to: this build has no CUDA kernels");
}

void backward_cuda(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                   const at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&, const at::Tensor&, at::Tensor&) {
  TORCH_CHECK(false, "layer_norm_to: this build has no CUDA kernels");
}

}  // namespace fused_ln_detail

}  // namespace ddptrain
