#include "models/layer_norm.h"

#include "kernels/fused_layer_norm.h"
#include "util/torch_compat.h"

namespace ddptrain {

at::Tensor layer_norm(const torch::nn::LayerNorm& ln, const at::Tensor& x, FusedNorm mode) {
  if (mode == FusedNorm::kOff || x.scalar_type() != at::kFloat || !ln->weight.defined() ||
      !ln->bias.defined() || ln->options.normalized_shape().size() != 1)
    return ln.ptr()->forward(x);
  const at::DeviceType device = x.device().type();
  const bool autocast = compat::AutocastGuard::is_enabled(device);
  if (mode == FusedNorm::kAuto && !(autocast && x.is_cuda() && fused_layer_norm_has_cuda() &&
                                    fused_ln_detail::cuda_kernels_take(x.size(-1))))
    return ln.ptr()->forward(x);
  const at::ScalarType out = autocast ? compat::AutocastGuard::get_dtype(device) : at::kFloat;
  return layer_norm_to(x, ln->weight, ln->bias, ln->options.eps(), out);
}

}  // namespace ddptrain
