#include "kernels/fused_layer_norm.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

namespace ddptrain {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// See Note [LayerNorm into the autocast dtype]. Saves the fp32 rows, the parameters and the
// row statistics, as ATen's LayerNorm does.
struct LayerNormTo : torch::autograd::Function<LayerNormTo> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps, at::ScalarType out) {
    const int64_t C = x.size(-1);
    const at::Tensor rows = x.contiguous().view({-1, C});
    at::Tensor y, mean, rstd;
    const bool cuda = layer_norm_to_uses_kernels(rows, out);
    ctx->saved_data["cuda"] = cuda;
    if (cuda) {
      const int64_t N = rows.size(0);
      y = at::empty({N, C}, rows.options().dtype(out));
      mean = at::empty({N}, rows.options());
      rstd = at::empty({N}, rows.options());
      fused_ln_detail::forward_cuda(rows, weight, bias, eps, y, mean, rstd);
    } else {
      auto r = at::native_layer_norm(rows, {C}, weight, bias, eps);
      y = std::get<0>(r).to(out);
      mean = std::get<1>(r);
      rstd = std::get<2>(r);
    }
    ctx->save_for_backward({rows, weight, bias, mean, rstd});
    return y.view(x.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3],
                     &rstd = saved[4];
    const int64_t C = rows.size(1);
    const at::Tensor dy = grads[0].contiguous().view({-1, C});
    at::Tensor dx, dweight, dbias;
    if (ctx->saved_data["cuda"].toBool()) {
      dx = at::empty_like(rows);
      dweight = at::empty_like(weight);
      dbias = at::empty_like(bias);
      fused_ln_detail::backward_cuda(dy, rows, mean, rstd, weight, dx, dweight, dbias);
    } else {
      auto r = at::native_layer_norm_backward(dy.to(rows.scalar_type()), rows, {C}, mean, rstd, weight, bias,
                                              {true, true, true});
      dx = std::get<0>(r);
      dweight = std::get<1>(r);
      dbias = std::get<2>(r);
    }
    return {dx.view(grads[0].sizes()), dweight, dbias, at::Tensor(), at::Tensor()};
  }
};

// rms_norm_to on the CUDA kernels (the other paths are ATen's ops under autograd). Saves the
// fp32 rows, the weight and the rows' 1 / rms.
struct RmsNormTo : torch::autograd::Function<RmsNormTo> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps,
                            at::ScalarType out) {
    const int64_t C = x.size(-1);
    const at::Tensor rows = x.contiguous().view({-1, C});
    const int64_t N = rows.size(0);
    at::Tensor y = at::empty({N, C}, rows.options().dtype(out)), rstd = at::empty({N}, rows.options()), none;
    fused_ln_detail::forward_cuda(rows, weight, at::Tensor(), eps, y, none, rstd);
    ctx->save_for_backward({rows, weight, rstd});
    return y.view(x.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &weight = saved[1], &rstd = saved[2];
    const at::Tensor dy = grads[0].contiguous().view({-1, rows.size(1)});
    at::Tensor dx = at::empty_like(rows), dweight = at::empty_like(weight), no_bias;
    fused_ln_detail::backward_cuda(dy, rows, at::Tensor(), rstd, weight, dx, dweight, no_bias);
    return {dx.view(grads[0].sizes()), dweight, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool layer_norm_to_uses_kernels(const at::Tensor& x, at::ScalarType out) {
  return x.is_cuda() && fused_layer_norm_has_cuda() && fused_ln_detail::cuda_kernels_take(x.size(-1)) &&
         (out == at::kFloat || out == at::kBFloat16 || out == at::kHalf);
}

at::Tensor layer_norm_to(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                         at::ScalarType out) {
  DDP_CHECK(x.dim() >= 1 && x.scalar_type() == at::kFloat, "layer_norm_to: fp32 input, got ",
            x.scalar_type());
  DDP_CHECK(weight.defined() && bias.defined() && weight.dim() == 1 && bias.dim() == 1 &&
                weight.size(0) == x.size(-1) && bias.size(0) == x.size(-1) &&
                weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
            "layer_norm_to: fp32 weight and bias of the last dimension's ", x.size(-1), " values");
  return LayerNormTo::apply(x, weight, bias, eps, out);
}

at::Tensor rms_norm_to(const at::Tensor& x, const at::Tensor& weight, double eps, at::ScalarType out) {
  DDP_CHECK(x.dim() >= 1 && x.scalar_type() == at::kFloat, "rms_norm_to: fp32 input, got ", x.scalar_type());
  DDP_CHECK(weight.defined() && weight.dim() == 1 && weight.size(0) == x.size(-1) &&
                weight.scalar_type() == at::kFloat,
            "rms_norm_to: an fp32 weight of the last dimension's ", x.size(-1), " values");
  if (layer_norm_to_uses_kernels(x, out)) return RmsNormTo::apply(x, weight, eps, out);
  return (weight * (x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps))).to(out);
}

}  // namespace ddptrain
