#include "ddp/sync_batchnorm.h"

#include <torch/autograd.h>

namespace ddptrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::vector<int64_t> reduce_dims(const at::Tensor& x) {
  std::vector<int64_t> d;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (i != 1) d.push_back(i);
  return d;
}

std::vector<int64_t> channel_shape(const at::Tensor& x) {
  std::vector<int64_t> s(static_cast<size_t>(x.dim()), 1);
  s[1] = x.size(1);
  return s;
}

struct SyncBatchNormFunction : torch::autograd::Function<SyncBatchNormFunction> {
  static at::Tensor forward(AutogradContext* actx, at::Tensor x, at::Tensor weight, at::Tensor bias,
                            at::Tensor running_mean, at::Tensor running_var, double eps, double momentum,
                            const DistContext* dist) {
    const int64_t C = x.size(1);
    const auto dims = reduce_dims(x);
    auto xd = x.to(at::kDouble);
    // (sum, sum of squares, count) of this rank, summed over all ranks in one all-reduce.
    std::vector<at::Tensor> stats{at::cat({xd.sum(dims), xd.pow(2).sum(dims),
                                           at::full({1}, static_cast<double>(x.numel() / C), xd.options())})};
    dist->all_reduce_sum(stats);
    const double n = stats[0][2 * C].item<double>();
    auto mean = stats[0].narrow(0, 0, C) / n;
    auto var = (stats[0].narrow(0, C, C) / n - mean * mean).clamp_min(0);  // biased
    auto invstd = (var + eps).rsqrt();
    {
      torch::NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
      running_var.mul_(1 - momentum)
          .add_((var * (n / std::max(n - 1, 1.0))).to(running_var.scalar_type()), momentum);
    }
    // The normalisation in fp32 at least (bf16/fp16 inputs under autocast), the output in the
    // input's dtype: as PyTorch's batch_norm_elemt (x - mean in bf16 lost up to 5e-3 a channel).
    const at::ScalarType compute = at::promote_types(x.scalar_type(), at::kFloat);
    auto shape = channel_shape(x);
    auto mean_f = mean.to(compute).view(shape), invstd_f = invstd.to(compute).view(shape);
    actx->save_for_backward({x, weight, mean_f, invstd_f});
    actx->saved_data["n"] = n;
    actx->saved_data["dist"] = reinterpret_cast<int64_t>(dist);
    return ((x.to(compute) - mean_f) * invstd_f * weight.view(shape).to(compute) +
            bias.view(shape).to(compute))
        .to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* actx, variable_list grads) {
    auto saved = actx->get_saved_variables();
    auto x = saved[0], weight = saved[1], mean = saved[2], invstd = saved[3];
    const double n = actx->saved_data["n"].toDouble();
    const auto* dist = reinterpret_cast<const DistContext*>(actx->saved_data["dist"].toInt());
    const at::ScalarType compute = mean.scalar_type();  // see forward
    auto dy = grads[0].to(compute);
    const auto dims = reduce_dims(x);
    const int64_t C = x.size(1);
    auto xmu = x.to(compute) - mean;
    auto sum_dy = dy.to(at::kDouble).sum(dims);
    auto sum_dy_xmu = (dy * xmu).to(at::kDouble).sum(dims);
    auto shape = channel_shape(x);
    // Local parameter gradients: DDP averages them across ranks.
    auto grad_weight = (sum_dy_xmu * invstd.reshape(-1).to(at::kDouble)).to(weight.scalar_type());
    auto grad_bias = sum_dy.to(weight.scalar_type());
    std::vector<at::Tensor> g{at::cat({sum_dy, sum_dy_xmu})};
    dist->all_reduce_sum(g);
    auto mean_dy = (g[0].narrow(0, 0, C) / n).to(compute).view(shape);
    auto mean_dy_xmu = (g[0].narrow(0, C, C) / n).to(compute).view(shape);
    auto dx = ((dy - mean_dy - xmu * invstd * invstd * mean_dy_xmu) * invstd * weight.view(shape).to(compute))
                  .to(x.scalar_type());
    return {dx, grad_weight, grad_bias, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(int64_t channels_, const DistContext& ctx_, double eps_,
                                     double momentum_)
    : channels(channels_), eps(eps_), momentum(momentum_), ctx(&ctx_) {
  reset();
}

void SyncBatchNormImpl::reset() {
  // The same names and order as BatchNorm2d: state_dicts are interchangeable.
  weight = register_parameter("weight", torch::ones({channels}));
  bias = register_parameter("bias", torch::zeros({channels}));
  running_mean = register_buffer("running_mean", torch::zeros({channels}));
  running_var = register_buffer("running_var", torch::ones({channels}));
  num_batches_tracked = register_buffer("num_batches_tracked", torch::tensor(0, torch::kLong));
}

torch::Tensor SyncBatchNormImpl::forward(const torch::Tensor& x) {
  if (!is_training() || ctx->world_size() == 1) {
    if (is_training()) {
      torch::NoGradGuard no_grad;
      num_batches_tracked.add_(1);
    }
    return torch::batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum, eps,
                             /*cudnn_enabled=*/true);
  }
  {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return SyncBatchNormFunction::apply(x, weight, bias, running_mean, running_var, eps, momentum, ctx);
}

std::function<torch::nn::AnyModule(int64_t channels)> sync_batchnorm_factory(const DistContext& ctx) {
  return [&ctx](int64_t channels) { return torch::nn::AnyModule(SyncBatchNorm(channels, ctx)); };
}

}  // namespace ddptrain
