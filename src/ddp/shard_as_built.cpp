#include "ddp/shard_as_built.h"

#include <algorithm>
#include <unordered_set>

#include "ddp/fully_sharded.h"
#include "ddp/same_units.h"

namespace ddptrain {

void ShardAsBuilt::built(Units& units, size_t unit, const std::string& name) {
  torch::nn::Module& m = *units.modules()[unit];
  // Before this unit's broadcasts: every rank hands over the same unit now.
  check_ranks_built_the_same_unit(units, unit, ctx_);
  if (fill_) fill_(name, m);
  std::vector<at::Tensor> order;  // DDP's: the trainable parameters, each once
  std::unordered_set<const void*> seen;
  for (const auto& p : m.parameters())
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) order.push_back(p);
  if (order.empty()) return;
  // unit_buckets' order: a unit's parameters in reverse, as their gradients arrive (the model's
  // parameter list visits a unit's parameters together, in this order).
  std::reverse(order.begin(), order.end());
  BuiltShard s = shard_bucket(order, ctx_.device(), ctx_, true);
  shard_bytes_ += static_cast<int64_t>(s.shard.nbytes());
  ++units_sharded_;
  units.set_built_shard(unit, std::move(s));
}

}  // namespace ddptrain
