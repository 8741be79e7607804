#include "data/epoch_plan.h"

#include <algorithm>

#include "util/error.h"

namespace ddptrain {

EpochPlan EpochPlan::fresh(int64_t n, int w, int64_t b, bool drop_last) {
  SamplerOptions o;
  o.dataset_len = n;
  o.world_size = w;
  const int64_t per_rank = DistributedSampler(o).num_samples();
  return {w, b, (drop_last ? per_rank / b * b : per_rank) * w, 0, n};
}

int64_t EpochPlan::done_after(int64_t micro, int world_now, int64_t batch_now) const {
  return std::min(end, done + micro * batch_now * world_now);
}

std::vector<int64_t> rest_of_epoch(SamplerOptions opts, int64_t epoch, const EpochPlan& plan, int world,
                                   int rank) {
  DDP_ASSERT(plan.done >= 0 && plan.done <= plan.end && world >= 1 && rank >= 0 && rank < world);
  opts.world_size = plan.world;
  opts.rank = 0;
  DistributedSampler sampler(opts);
  sampler.set_epoch(epoch);
  const std::vector<int64_t> order = sampler.global_order();
  DDP_ASSERT(plan.end <= static_cast<int64_t>(order.size()), "an epoch plan beyond its order");
  const int64_t left = plan.end - plan.done;
  const int64_t padded = (left + world - 1) / world * world;  // as PyTorch pads: repeat from the start
  std::vector<int64_t> mine;
  for (int64_t k = rank; k < padded && left > 0; k += world)
    mine.push_back(order[static_cast<size_t>(plan.done + k % left)]);
  return mine;
}

}  // namespace ddptrain
