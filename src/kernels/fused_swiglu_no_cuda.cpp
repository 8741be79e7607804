// A build without ddptrain's CUDA kernels: swiglu runs ATen's ops on every device (Note [SwiGLU
// in one pass]; kernels/fused_swiglu_cuda.cu replaces this file where they are compiled).
#include <c10/util/Exception.h>

#include "kernels/fused_swiglu.h"

namespace ddptrain {

bool fused_swiglu_has_cuda() { return false; }

namespace fused_swiglu_detail {

void forward_cuda(const at::Tensor&, at::Tensor&) {
  TORCH_CHECK(false, "swiglu: this build has no CUDA kernels");
}

void backward_cuda(const at::Tensor&, const at::Tensor&, at::Tensor&) {
  TORCH_CHECK(false, "swiglu: this build has no CUDA kernels");
}

}  // namespace fused_swiglu_detail

}  // namespace ddptrain
