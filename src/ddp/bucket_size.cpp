#include "ddp/bucket_size.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "obs/logger.h"

namespace ddptrain {
namespace {

constexpr double kMib = 1 << 20;

// E(c) of Note [Bucket size from the link].
double exposed_s(const LinkCost& link, double grad_bytes, double cap_bytes, double backward_s) {
  const double last = link.latency_s + std::min(cap_bytes, grad_bytes) * link.seconds_per_byte;
  const double all = std::ceil(grad_bytes / cap_bytes) * link.latency_s + grad_bytes * link.seconds_per_byte;
  return last + std::max(0.0, all - std::max(0.0, backward_s));
}

// The fastest of `reps` synchronous all-reduces of t (after one to warm up and line the ranks
// up). item() waits for the result on a GPU too, so the time is the collective's, not its launch.
double fastest_all_reduce_s(const DistContext& ctx, at::Tensor t, int reps) {
  std::vector<at::Tensor> ts{t};
  ctx.all_reduce_sum(ts, "link-probe all_reduce (bucket_cap_mb=auto)");
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ctx.all_reduce_sum(ts, "link-probe all_reduce (bucket_cap_mb=auto)");
    ts[0][0].item<float>();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

BucketCapChoice choose_bucket_cap(const LinkCost& link, int64_t grad_bytes, double backward_s) {
  const double g = static_cast<double>(std::max<int64_t>(grad_bytes, 1));
  double best = 1e30;
  for (double mib : kBucketCapCandidatesMib)
    best = std::min(best, exposed_s(link, g, mib * kMib, backward_s));
  const double tolerance = std::max(0.5e-3, 0.005 * std::max(0.0, backward_s));
  BucketCapChoice c;
  for (double mib : kBucketCapCandidatesMib) {
    const double e = exposed_s(link, g, mib * kMib, backward_s);
    if (e <= best + tolerance) {
      c.cap_bytes = static_cast<size_t>(mib * kMib);
      c.exposed_s = e;
    }
  }
  c.why = str("bucket_cap_mb=auto: all-reduce latency ", fmt("%.0f", link.latency_s * 1e6), " us, ",
              fmt("%.2f", link.seconds_per_byte > 0 ? 1e-9 / link.seconds_per_byte : 0.0), " GB/s; ",
              fmt("%.1f", g / kMib), " MiB of gradients; backward ~", fmt("%.3f", backward_s),
              " s (estimated): buckets of ", fmt("%.0f", static_cast<double>(c.cap_bytes) / kMib),
              " MiB leave ~", fmt("%.1f", c.exposed_s * 1e3), " ms of communication exposed per step");
  return c;
}

BucketCapChoice agreed_bucket_cap(const DistContext& ctx, int64_t grad_bytes, double backward_s) {
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(ctx.device());
  constexpr int64_t kSmall = 256, kLarge = 1 << 20;  // 1 KiB and 4 MiB
  const double small_s = fastest_all_reduce_s(ctx, at::zeros({kSmall}, opts), 5);
  const double large_s = fastest_all_reduce_s(ctx, at::zeros({kLarge}, opts), 3);
  // Every rank must build the same buckets: average what the ranks measured and estimated
  // (each rank's backward estimate comes from its own kernel probe).
  std::vector<at::Tensor> sums{
      at::tensor({small_s, large_s, backward_s}, at::TensorOptions().dtype(at::kDouble)).to(ctx.device())};
  ctx.all_reduce_sum(sums, "link-probe result all_reduce (bucket_cap_mb=auto)");
  const at::Tensor mean = sums[0].cpu() / ctx.world_size();
  const double s = mean[0].item<double>(), l = mean[1].item<double>();
  const LinkCost link{s, std::max(0.0, l - s) / (4.0 * (kLarge - kSmall))};
  return choose_bucket_cap(link, grad_bytes, mean[2].item<double>());
}

}  // namespace ddptrain
