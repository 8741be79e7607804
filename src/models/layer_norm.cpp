#include "models/layer_norm.h"

#include "kernels/fused_layer_norm.h"
#include "util/torch_compat.h"

namespace ddptrain {

std::optional<at::ScalarType> fused_norm_output(const at::Tensor& x, FusedNorm mode) {
  if (mode == FusedNorm::kOff || x.scalar_type() != at::kFloat) return std::nullopt;
  const at::DeviceType device = x.device().type();
  const bool autocast = compat::AutocastGuard::is_enabled(device);
  const at::ScalarType out = autocast ? compat::AutocastGuard::get_dtype(device) : at::kFloat;
  if (mode == FusedNorm::kAuto && !(autocast && layer_norm_to_uses_kernels(x, out))) return std::nullopt;
  return out;
}

at::Tensor layer_norm(const torch::nn::LayerNorm& ln, const at::Tensor& x, FusedNorm mode) {
  const std::optional<at::ScalarType> out = fused_norm_output(x, mode);
  if (!out || !ln->weight.defined() || !ln->bias.defined() || ln->options.normalized_shape().size() != 1)
    return ln.ptr()->forward(x);
  return layer_norm_to(x, ln->weight, ln->bias, ln->options.eps(), *out);
}

std::pair<at::Tensor, at::Tensor> add_layer_norm(const torch::nn::LayerNorm& ln, const at::Tensor& x,
                                                 const at::Tensor& branch, FusedNorm mode) {
  if (!branch.defined()) return {x, layer_norm(ln, x, mode)};
  const std::optional<at::ScalarType> out = fused_norm_output(x, mode);
  if (!out || !ln->weight.defined() || !ln->bias.defined() || ln->options.normalized_shape().size() != 1) {
    const at::Tensor h = x + branch;
    return {h, layer_norm(ln, h, mode)};
  }
  return add_layer_norm_to(x, branch, ln->weight, ln->bias, ln->options.eps(), *out);
}

}  // namespace ddptrain
