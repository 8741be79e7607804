#include "kernels/fused_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include "util/error.h"

namespace ddptrain {

namespace fused_ce_detail {

namespace {

// Rows per chunk: about 32 MiB of fp32 at a time.
int64_t chunk_rows(int64_t V) { return std::max<int64_t>(1, (int64_t{8} << 20) / std::max<int64_t>(V, 1)); }

}  // namespace

void forward_cpu(const at::Tensor& logits, const at::Tensor& targets, at::Tensor& lse, at::Tensor& losses,
                 at::Tensor& hits) {
  const int64_t N = logits.size(0), V = logits.size(1), step = chunk_rows(V);
  for (int64_t r = 0; r < N; r += step) {
    const int64_t n = std::min(step, N - r);
    const at::Tensor x = logits.narrow(0, r, n).to(at::kFloat);
    const at::Tensor l = at::logsumexp(x, {1});
    lse.narrow(0, r, n).copy_(l);
    const at::Tensor t = targets.narrow(0, r, n);
    losses.narrow(0, r, n).copy_(l - x.gather(1, t.unsqueeze(1)).squeeze(1));
    // As the CUDA pass counts: no hit in a row with a NaN or only -inf (its log-sum-exp says).
    hits.narrow(0, r, n).copy_(
        x.argmax(1).eq(t).logical_and_(l.isnan().logical_not_()).logical_and_(l.ne(-INFINITY)));
  }
}

void backward_cpu(at::Tensor& logits, const at::Tensor& targets, const at::Tensor& lse,
                  const at::Tensor& scale) {
  const int64_t N = logits.size(0), V = logits.size(1), step = chunk_rows(V);
  for (int64_t r = 0; r < N; r += step) {
    const int64_t n = std::min(step, N - r);
    at::Tensor rows = logits.narrow(0, r, n);
    at::Tensor p = (rows.to(at::kFloat) - lse.narrow(0, r, n).unsqueeze(1)).exp_();
    p.scatter_add_(1, targets.narrow(0, r, n).unsqueeze(1), at::full({n, 1}, -1.0f, p.options()));
    rows.copy_(p.mul_(scale));
  }
}

}  // namespace fused_ce_detail

bool gradient_may_overwrite(const at::Tensor& logits) {
  // The names of LibTorch's autograd nodes (the same on every device): views, walked through to
  // the op whose output they show; ops whose backward reads their inputs, never their output.
  static const std::set<std::string> kViews = {
      "ViewBackward0",      "UnsafeViewBackward0", "ReshapeAliasBackward0", "AsStridedBackward0",
      "TransposeBackward0", "TBackward0",          "PermuteBackward0",      "SliceBackward0",
      "SqueezeBackward0",   "SqueezeBackward1",    "UnsqueezeBackward0",    "AliasBackward0"};
  static const std::set<std::string> kOwnOutput = {
      "MmBackward0",  "AddmmBackward0", "BmmBackward0", "LinearBackward0", "AddBackward0",
      "SubBackward0", "MulBackward0",   "DivBackward0", "ToCopyBackward0", "CloneBackward0",
      "AddBackward1", "MulBackward1",   "DivBackward1", "SubBackward1",    "MatmulBackward0"};
  auto node = logits.grad_fn();
  for (int depth = 0; node && depth < 32; ++depth) {
    const std::string name = node->name();
    const bool view = kViews.count(name) > 0 || name.find("RealVocabView") != std::string::npos;
    if (!view) return kOwnOutput.count(name) > 0;
    if (node->next_edges().empty()) return false;
    node = node->next_edges()[0].function;
  }
  return false;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedCrossEntropy : torch::autograd::Function<FusedCrossEntropy> {
  // {the mean loss, the hits' count (not differentiable)}.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets) {
    const int64_t N = logits.size(0);
    const auto f32 = logits.options().dtype(at::kFloat);
    at::Tensor lse = at::empty({N}, f32), losses = at::empty({N}, f32),
               hits = at::empty({N}, logits.options().dtype(at::kLong));
    if (logits.is_cuda())
      fused_ce_detail::forward_cuda(logits, targets, lse, losses, hits);
    else
      fused_ce_detail::forward_cpu(logits, targets, lse, losses, hits);
    ctx->save_for_backward({logits, targets, lse});
    // Rows that overlap (an as_strided view's row stride below V) would have several rows'
    // gradients written into the same memory: a copy then.
    ctx->saved_data["in_place"] =
        gradient_may_overwrite(logits) && (logits.size(0) < 2 || logits.stride(0) >= logits.size(1));
    at::Tensor count = hits.sum();
    ctx->mark_non_differentiable({count});
    return {losses.sum() / static_cast<double>(N), count};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    auto saved = ctx->get_saved_variables();
    // The gradient in the logits' memory where nothing else needs them, else in a copy (rows
    // contiguous, as the passes want).
    at::Tensor logits =
        ctx->saved_data["in_place"].toBool() ? saved[0] : saved[0].clone(at::MemoryFormat::Contiguous);
    const at::Tensor scale = (grad[0].to(at::kFloat) / static_cast<double>(logits.size(0))).reshape({});
    {
      at::NoGradGuard no_grad;
      if (logits.is_cuda()) {
        fused_ce_detail::backward_cuda(logits, saved[1], saved[2], scale);
        // Written through a pointer: a version bump as the CPU path's copy_ makes, so a node that
        // saved the logits too (which gradient_may_overwrite rules out) fails alike on both.
        logits.unsafeGetTensorImpl()->bump_version();
      } else {
        fused_ce_detail::backward_cpu(logits, saved[1], saved[2], scale);
      }
    }
    return {logits, at::Tensor()};
  }
};

}  // namespace

std::pair<at::Tensor, at::Tensor> fused_cross_entropy_and_hits(const at::Tensor& logits,
                                                               const at::Tensor& targets) {
  DDP_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
            "fused_cross_entropy: logits (N, V) and targets (N), got ", logits.sizes(), " and ",
            targets.sizes());
  DDP_CHECK(logits.stride(1) == 1, "fused_cross_entropy: the logits' rows must be contiguous (stride ",
            logits.stride(1), ")");
  DDP_CHECK(targets.scalar_type() == at::kLong, "fused_cross_entropy: int64 targets, got ",
            targets.scalar_type());
  DDP_CHECK(targets.device() == logits.device(), "fused_cross_entropy: targets on ", targets.device(),
            ", logits on ", logits.device());
  DDP_CHECK(logits.size(0) > 0, "fused_cross_entropy: no rows");
  if (!logits.is_cuda()) {
    const auto [lo, hi] = at::aminmax(targets);
    DDP_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < logits.size(1),
              "fused_cross_entropy: a target outside [0, ", logits.size(1), ")");
  }
  variable_list out = FusedCrossEntropy::apply(logits, targets);
  return {out[0], out[1]};
}

at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  return fused_cross_entropy_and_hits(logits, targets).first;
}

}  // namespace ddptrain
