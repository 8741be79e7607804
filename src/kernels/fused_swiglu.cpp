#include "kernels/fused_swiglu.h"

#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

namespace ddptrain {

namespace {

// See Note [SwiGLU in one pass]: the CUDA kernels; saves gate_up only (silu is recomputed).
struct SwiGluCuda : torch::autograd::Function<SwiGluCuda> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gate_up) {
    const int64_t F = gate_up.size(-1) / 2;
    const at::Tensor rows = gate_up.reshape({-1, 2 * F}).contiguous();
    std::vector<int64_t> sizes = gate_up.sizes().vec();
    sizes.back() = F;
    // The output itself, not a view (autograd lets a Function's own output be modified in place).
    const at::Tensor out = at::empty(sizes, rows.options());
    at::Tensor out_rows = out.view({-1, F});
    fused_swiglu_detail::forward_cuda(rows, out_rows);
    ctx->save_for_backward({rows});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    DDP_CHECK(!at::GradMode::is_enabled(),
              "swiglu: a backward with create_graph (double backward) is not supported by its CUDA kernels");
    const at::Tensor rows = ctx->get_saved_variables()[0];
    const at::Tensor dout = grads[0].reshape({-1, rows.size(1) / 2}).contiguous().to(rows.scalar_type());
    std::vector<int64_t> sizes = grads[0].sizes().vec();
    sizes.back() = rows.size(1);
    const at::Tensor dgate_up = at::empty(sizes, rows.options());
    at::Tensor dgate_up_rows = dgate_up.view({-1, rows.size(1)});
    fused_swiglu_detail::backward_cuda(dout, rows, dgate_up_rows);
    return {dgate_up};
  }
};

bool swiglu_uses_kernels(const at::Tensor& gate_up) {
  const at::ScalarType t = gate_up.scalar_type();
  return gate_up.is_cuda() && fused_swiglu_has_cuda() && gate_up.numel() > 0 &&
         (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
}

}  // namespace

at::Tensor swiglu(const at::Tensor& gate_up) {
  DDP_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
            "swiglu: gate_up (..., 2 x the MLP's width), gate's columns then up's, got ", gate_up.sizes());
  if (swiglu_uses_kernels(gate_up)) return SwiGluCuda::apply(gate_up);
  const std::vector<at::Tensor> halves = gate_up.chunk(2, -1);
  return at::silu(halves[0]) * halves[1];
}

}  // namespace ddptrain
