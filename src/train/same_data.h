// Note [Every rank holds the same data]
// Each rank opens its own copy of the data (its node's folder, its own listing), and the
// sampler draws one order over the size each rank has. Ranks whose copies differ (a sync still
// running on one node, another --data_dir there) would draw different orders, training some
// samples twice and others never, or take different numbers of steps and hang at the next
// collective; an evaluation split of another size hangs the evaluation. No collective would
// notice until then. So before it trains (and `ddptrain eval` before it evaluates) every rank
// gathers each split's size and sample shape, and a difference is a usage error on every rank
// naming the ranks and what differs. One all_gather; nothing at world 1.
#pragma once

#include <utility>
#include <vector>

#include "data/datasets.h"
#include "dist/dist_context.h"

namespace ddptrain {

/// A split as the check names it ("training", "test") and its dataset (null: the rank has none).
using NamedSplit = std::pair<const char*, const Dataset*>;

/// UsageError on every rank unless every rank holds each split with the same number of samples
/// of the same shape (Note [Every rank holds the same data]). A collective.
void check_ranks_hold_the_same_data(const DistContext& ctx, const std::vector<NamedSplit>& splits);

}  // namespace ddptrain
