// A build without ddptrain's CUDA kernels (no CUDA LibTorch or no nvcc): the CUDA passes of
// Note [Fused cross-entropy] refuse, naming the fix (kernels/fused_cross_entropy_cuda.cu
// replaces this file where they are compiled).
#include <c10/util/Exception.h>

#include "kernels/fused_cross_entropy.h"

namespace ddptrain {

bool fused_cross_entropy_has_cuda() { return false; }

namespace fused_ce_detail {

void forward_cuda(const at::Tensor&, const at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&) {
  TORCH_CHECK(
      false, "fused_cross_entropy: this build has no CUDA kernels (configure with a CUDA LibTorch and nvcc)");
}

void backward_cuda(at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
  TORCH_CHECK(
      false, "fused_cross_entropy: this build has no CUDA kernels (configure with a CUDA LibTorch and nvcc)");
}

}  // namespace fused_ce_detail

}  // namespace ddptrain
