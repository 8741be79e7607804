// A build without ddptrain's CUDA kernels: no cuBLASLt epilogues (Note [Linear epilogues in
// cuBLASLt]; kernels/fused_linear_cuda.cu replaces this file where they are compiled), so the
// models' Linear layers and MLP run at::linear and at::gelu on every device.
#include "kernels/fused_linear.h"

namespace ddptrain {

bool fused_linear_has_cuda() { return false; }

namespace fused_linear_detail {

bool lt_matmul(const LtGemm&) { return false; }

}  // namespace fused_linear_detail

}  // namespace ddptrain
