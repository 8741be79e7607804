#include "ddp/shard_layout.h"

#include <algorithm>

namespace ddptrain {

std::vector<BucketShards> shard_buckets(const std::vector<int64_t>& numels,
                                        const std::vector<std::vector<size_t>>& buckets, int world_size) {
  std::vector<BucketShards> out;
  for (const auto& bucket : buckets) {
    int64_t total = 0;
    for (size_t p : bucket) total += numels[p];
    BucketShards b;
    b.shard_numel = (total + world_size - 1) / world_size;
    b.by_rank.resize(static_cast<size_t>(world_size));
    int64_t start = 0;  // the parameter's first element in the bucket
    for (size_t p : bucket) {
      const int64_t end = start + numels[p];
      for (int r = 0; r < world_size && b.shard_numel > 0; ++r) {
        const int64_t lo = std::max(start, r * b.shard_numel), hi = std::min(end, (r + 1) * b.shard_numel);
        if (lo < hi)
          b.by_rank[static_cast<size_t>(r)].push_back({p, lo - start, lo - r * b.shard_numel, hi - lo});
      }
      start = end;
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace ddptrain
