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
      at::Tensor no_sum;
      fused_ln_detail::forward_cuda(rows, weight, bias, eps, y, mean, rstd, at::Tensor(), no_sum);
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
      at::Tensor no_branch;
      fused_ln_detail::backward_cuda(dy, rows, mean, rstd, weight, dx, dweight, dbias, at::Tensor(),
                                     no_branch);
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
    fused_ln_detail::forward_cuda(rows, weight, at::Tensor(), eps, y, none, rstd, at::Tensor(), none);
    ctx->save_for_backward({rows, weight, rstd});
    return y.view(x.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &rows = saved[0], &weight = saved[1], &rstd = saved[2];
    const at::Tensor dy = grads[0].contiguous().view({-1, rows.size(1)});
    at::Tensor dx = at::empty_like(rows), dweight = at::empty_like(weight), no_bias;
    fused_ln_detail::backward_cuda(dy, rows, at::Tensor(), rstd, weight, dx, dweight, no_bias, at::Tensor(),
                                   no_bias);
    return {dx.view(grads[0].sizes()), dweight, at::Tensor(), at::Tensor()};
  }
};

// add_layer_norm_to and add_rms_norm_to (no bias) on the CUDA kernels: outputs the sum h and the
// norm y; backward takes both gradients (h's may be undefined: the sum unused after) and
// returns x's (h's plus the norm's) and the branch's (the same, in the branch's dtype).
struct AddNormTo : torch::autograd::Function<AddNormTo> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& branch,
                               const at::Tensor& weight, const at::Tensor& bias, double eps,
                               at::ScalarType out) {
    const int64_t C = x.size(-1);
    const at::Tensor rows = x.contiguous().view({-1, C}), brows = branch.contiguous().view({-1, C});
    const int64_t N = rows.size(0);
    at::Tensor y = at::empty({N, C}, rows.options().dtype(out)), h = at::empty({N, C}, rows.options());
    at::Tensor mean = bias.defined() ? at::empty({N}, rows.options()) : at::Tensor(),
               rstd = at::empty({N}, rows.options());
    fused_ln_detail::forward_cuda(rows, weight, bias, eps, y, mean, rstd, brows, h);
    ctx->save_for_backward({h, weight, bias, mean, rstd});
    ctx->saved_data["out"] = out;
    ctx->set_materialize_grads(false);  // an unused sum adds nothing (no zeros read)
    return {h.view(x.sizes()), y.view(x.sizes())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &h = saved[0], &weight = saved[1], &bias = saved[2], &mean = saved[3], &rstd = saved[4];
    if (!grads[0].defined() && !grads[1].defined()) return variable_list(6);  // nothing flows back
    const int64_t C = h.size(1);
    const at::ScalarType out = ctx->saved_data["out"].toScalarType();
    const at::Tensor dy = grads[1].defined() ? grads[1].contiguous().view({-1, C}) : at::zeros_like(h, out);
    const at::Tensor dh = grads[0].defined() ? grads[0].contiguous().view({-1, C}) : at::Tensor();
    at::Tensor dx = at::empty_like(h), dbranch = at::empty_like(h, out), dweight = at::empty_like(weight),
               dbias = bias.defined() ? at::empty_like(bias) : at::Tensor();
    fused_ln_detail::backward_cuda(dy, h, mean, rstd, weight, dx, dweight, dbias, dh, dbranch);
    const auto sizes = grads[0].defined() ? grads[0].sizes() : grads[1].sizes();
    return {dx.view(sizes), dbranch.view(sizes), dweight, dbias, at::Tensor(), at::Tensor()};
  }
};

// Whether the add-and-norm kernels take x + branch into `out`: layer_norm_to's kernels, and a
// branch of x's shape in the output's dtype (the kernels read it as such).
bool add_norm_uses_kernels(const at::Tensor& x, const at::Tensor& branch, at::ScalarType out) {
  return layer_norm_to_uses_kernels(x, out) && branch.scalar_type() == out && branch.sizes() == x.sizes() &&
         branch.device() == x.device();
}

// The arguments every norm here takes: fp32 x, an fp32 weight (and bias, unless RMSNorm's) of
// the last dimension's size; a branch of x's shape.
void check_norm_args(const char* op, const at::Tensor& x, const at::Tensor& weight, const at::Tensor* bias,
                     const at::Tensor* branch = nullptr) {
  DDP_CHECK(x.dim() >= 1 && x.scalar_type() == at::kFloat, op, ": fp32 input, got ", x.scalar_type());
  auto fits = [&](const at::Tensor& p) {
    return p.defined() && p.dim() == 1 && p.size(0) == x.size(-1) && p.scalar_type() == at::kFloat &&
           p.device() == x.device();
  };
  DDP_CHECK(fits(weight) && (!bias || fits(*bias)), op, ": fp32 ", bias ? "weight and bias" : "weight",
            " of the last dimension's ", x.size(-1), " values on x's device");
  DDP_CHECK(!branch || branch->sizes() == x.sizes(), op, ": a branch of x's shape ", x.sizes(), ", got ",
            branch->sizes());
}

}  // namespace

bool layer_norm_to_uses_kernels(const at::Tensor& x, at::ScalarType out) {
  return x.is_cuda() && fused_layer_norm_has_cuda() && fused_ln_detail::cuda_kernels_take(x.size(-1)) &&
         (out == at::kFloat || out == at::kBFloat16 || out == at::kHalf);
}

at::Tensor layer_norm_to(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                         at::ScalarType out) {
  check_norm_args("layer_norm_to", x, weight, &bias);
  return LayerNormTo::apply(x, weight, bias, eps, out);
}

std::pair<at::Tensor, at::Tensor> add_layer_norm_to(const at::Tensor& x, const at::Tensor& branch,
                                                    const at::Tensor& weight, const at::Tensor& bias,
                                                    double eps, at::ScalarType out) {
  check_norm_args("add_layer_norm_to", x, weight, &bias, &branch);
  if (!add_norm_uses_kernels(x, branch, out)) {
    const at::Tensor h = x + branch;
    return {h, layer_norm_to(h, weight, bias, eps, out)};
  }
  auto r = AddNormTo::apply(x, branch, weight, bias, eps, out);
  return {r[0], r[1]};
}

std::pair<at::Tensor, at::Tensor> add_rms_norm_to(const at::Tensor& x, const at::Tensor& branch,
                                                  const at::Tensor& weight, double eps, at::ScalarType out) {
  check_norm_args("add_rms_norm_to", x, weight, nullptr, &branch);
  if (!add_norm_uses_kernels(x, branch, out)) {
    const at::Tensor h = x + branch;
    return {h, rms_norm_to(h, weight, eps, out)};
  }
  auto r = AddNormTo::apply(x, branch, weight, at::Tensor(), eps, out);
  return {r[0], r[1]};
}

at::Tensor rms_norm_to(const at::Tensor& x, const at::Tensor& weight, double eps, at::ScalarType out) {
  check_norm_args("rms_norm_to", x, weight, nullptr);
  if (layer_norm_to_uses_kernels(x, out)) return RmsNormTo::apply(x, weight, eps, out);
  return rms_norm_ops(x, weight, eps).to(out);
}

at::Tensor rms_norm_ops(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

}  // namespace ddptrain
