#include "kernels/fused_rotary.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

namespace ddptrain {

namespace {

// transformers' rotate_half: (x1, x2) -> (-x2, x1) over the last dimension's halves.
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return at::cat({-x.slice(-1, h), x.slice(-1, 0, h)}, -1);
}

// See Note [Rotary in one pass]: the CUDA kernels; saves cos and sin only (the rotation is
// linear: its backward needs no input).
struct RotaryCuda : torch::autograd::Function<RotaryCuda> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    at::Tensor out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
    fused_rotary_detail::rotate_cuda(x, cos, sin, /*transpose=*/false, out);
    ctx->save_for_backward({cos, sin});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    at::Tensor dx =
        at::empty(grads[0].sizes(), grads[0].options().memory_format(at::MemoryFormat::Contiguous));
    fused_rotary_detail::rotate_cuda(grads[0], saved[0], saved[1], /*transpose=*/true, dx);
    return {dx, at::Tensor(), at::Tensor()};
  }
};

bool rotary_uses_kernels(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::ScalarType t = x.scalar_type();
  return x.is_cuda() && fused_rotary_has_cuda() && cos.device() == x.device() && sin.device() == x.device() &&
         (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
}

}  // namespace

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  DDP_CHECK(x.dim() == 4 && x.size(-1) % 2 == 0,
            "rotary: x of (batch, heads, positions, an even head size), got ", x.sizes());
  DDP_CHECK(cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.size(0) == x.size(2) &&
                cos.size(1) == x.size(3) && cos.scalar_type() == at::kFloat &&
                sin.scalar_type() == at::kFloat,
            "rotary: fp32 cos and sin of (positions, head size) = ", x.size(2), " x ", x.size(3), ", got ",
            cos.sizes(), " and ", sin.sizes());
  if (rotary_uses_kernels(x, cos, sin)) return RotaryCuda::apply(x, cos.contiguous(), sin.contiguous());
  const at::Tensor xf = x.to(at::kFloat);
  return (xf * cos + rotate_half(xf) * sin).to(x.scalar_type());
}

}  // namespace ddptrain
