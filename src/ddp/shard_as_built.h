// ZeRO stage 3's UnitSink (Note [Units sharded as built]): a unit handed over by the model's
// constructor gets its initial weights from a file when asked, rank 0's values broadcast, and
// keeps this rank's shard; its parameters then hold no memory until FullyShardedParams
// gathers them. A rank so holds its shards, the parameters outside the units, and one unit at a
// time, never the whole model.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <torch/nn/module.h>

#include "ddp/units.h"
#include "dist/dist_context.h"

namespace ddptrain {

class ShardAsBuilt : public UnitSink {
 public:
  /// Writes a unit's initial weights over the drawn ones before it is sharded (name: the unit's
  /// path in the model, e.g. "h.3"); empty: the drawn ones are kept.
  using Fill = std::function<void(const std::string& name, torch::nn::Module& unit)>;

  explicit ShardAsBuilt(const DistContext& ctx, Fill fill = {}) : ctx_(ctx), fill_(std::move(fill)) {}

  void built(Units& units, size_t unit, const std::string& name) override;

  size_t units_sharded() const { return units_sharded_; }
  /// This rank's shards of them, in bytes.
  int64_t shard_bytes() const { return shard_bytes_; }

 private:
  const DistContext& ctx_;
  Fill fill_;
  size_t units_sharded_ = 0;
  int64_t shard_bytes_ = 0;
};

}  // namespace ddptrain
