#include "train/epoch_summary.h"

#include "obs/memory.h"

namespace ddptrain {

EpochSums::EpochSums(c10::Device device)
    : sums_(at::zeros({3}, at::TensorOptions().dtype(at::kDouble).device(device))) {}

void EpochSums::add(const at::Tensor& loss_d, const at::Tensor& output, const at::Tensor& targets,
                    const Objective& objective) {
  if (objective.correct) sums_[1].add_(objective.correct(output, targets).reshape({}));
  if (!objective.count) {
    sums_[0].add_(loss_d * static_cast<double>(targets.numel()));
    sums_[2].add_(static_cast<double>(targets.numel()));
    return;
  }
  // A batch of no counted targets adds nothing, whatever its loss (0/0 in a user's mean).
  const at::Tensor n = objective.count(output, targets).reshape({}).to(sums_.device(), at::kDouble);
  sums_[0].add_(at::where(n > 0, loss_d.reshape({}) * n, at::zeros({}, sums_.options())));
  sums_[2].add_(n);
}

EpochSums::Summary EpochSums::reduce(const DistContext& ctx, bool has_correct, int64_t skipped) const {
  const MemoryStats mem = memory_stats(ctx.device());
  const int W = ctx.world_size();
  at::Tensor summary = at::zeros({4 + 2 * W}, sums_.options());
  summary.narrow(0, 0, 3).copy_(sums_);
  summary[3] = static_cast<double>(skipped);
  summary[4 + ctx.rank()] = static_cast<double>(mem.peak_bytes);
  summary[4 + W + ctx.rank()] = static_cast<double>(peak_rss_bytes());
  std::vector<at::Tensor> sums{summary};
  ctx.all_reduce_sum(sums, "epoch-summary all_reduce");
  const at::Tensor s = sums[0].cpu();
  Summary out;
  out.train_loss = s[0].item<double>() / s[2].item<double>();
  if (has_correct) out.train_acc = s[1].item<double>() / s[2].item<double>();
  out.skipped_samples = static_cast<int64_t>(s[3].item<double>());
  for (int r = 0; r < W; ++r) {
    if (mem.peak_bytes >= 0) out.peak_mem_mib.push_back(s[4 + r].item<double>() / (1 << 20));
    out.peak_rss_mib.push_back(s[4 + W + r].item<double>() / (1 << 20));
  }
  return out;
}

}  // namespace ddptrain
