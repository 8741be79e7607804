// Note [Every rank holds the same data]
// Each rank opens its own copy of the data (its node's folder, its own listing), and the
// sampler draws one order over the size each rank has. Ranks whose copies differ (a sync still
// running on one node, another --data_dir there, a class folder named otherwise) would draw
// different orders or label the same images otherwise, training some samples twice and
// others never, or take different numbers of steps and hang at the next collective; an
// evaluation split of another size hangs the evaluation. No collective would notice until
// then. So before it trains (and `ddptrain eval` before it evaluates) every rank gathers each
// split's size, sample shape, an image folder's class names and a hash of the files the
// samples are read from (Dataset::files_hash: a shard renamed or replaced on one node), and a difference is a
// usage error on every rank naming the ranks and what differs. A rank that cannot open its data at all (a
// file missing on its node) says so to the others first (open_data_on_every_rank, Note [A failure on some
// ranks stops every rank]), so that they stop with it instead of waiting in the gather. At world 1 nothing is
// gathered.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "data/datasets.h"
#include "dist/dist_context.h"

namespace ddptrain {

/// A split as the check names it ("training", "test") and its dataset (null: the rank has none).
using NamedSplit = std::pair<const char*, const Dataset*>;

/// UsageError on every rank unless every rank holds each split with the same number of samples
/// of the same shape (and an image folder's classes of the same names) (Note [Every rank holds
/// the same data]). A collective.
void check_ranks_hold_the_same_data(const DistContext& ctx, const std::vector<NamedSplit>& splits);

/// `open()` on every rank, then check_ranks_hold_the_same_data over its training and test
/// splits. A rank whose open() throws rethrows its error once every rank knows; the others
/// stop naming how many could not open it (Note [A failure on some ranks stops every rank]).
/// Collectives.
DataSplits open_data_on_every_rank(const DistContext& ctx, const std::function<DataSplits()>& open);

}  // namespace ddptrain
