// A build without ddptrain's CUDA kernels: rotary runs ATen's ops on every device (Note
// [Rotary in one pass]; kernels/fused_rotary_cuda.cu replaces this file where they are compiled).
#include <c10/util/Exception.h>

#include "kernels/fused_rotary.h"

namespace ddptrain {

bool fused_rotary_has_cuda() { return false; }

namespace fused_rotary_detail {

void rotate_cuda(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool, at::Tensor&) {
  TORCH_CHECK(false, "rotary: this build has no CUDA kernels");
}

}  // namespace fused_rotary_detail

}  // namespace ddptrain
