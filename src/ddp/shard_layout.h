// Which elements of the parameters each rank owns under ZeRO (Note [ZeRO stage 1]): each
// gradient bucket's parameters, laid end to end in memory order, are padded to a multiple of
// the world size and cut into world_size equal, contiguous shards; rank r owns shard r. A
// shard covers pieces of one or more parameters; padding belongs to no parameter. Pure
// arithmetic, the same on every rank.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddptrain {

/// A contiguous run of one parameter's elements (in its memory order) inside a shard.
struct ShardPiece {
  size_t param = 0;          // index into the parameter list
  int64_t param_offset = 0;  // first element, in the parameter's memory order
  int64_t shard_offset = 0;  // where it sits in the shard
  int64_t length = 0;
};

struct BucketShards {
  int64_t shard_numel = 0;                       // elements per rank's shard (padding included)
  std::vector<std::vector<ShardPiece>> by_rank;  // world_size lists
};

/// numels: elements of each parameter; buckets: parameter indices per bucket, in bucket order.
std::vector<BucketShards> shard_buckets(const std::vector<int64_t>& numels,
                                        const std::vector<std::vector<size_t>>& buckets, int world_size);

}  // namespace ddptrain
