// Note [A failure on some ranks stops every rank]
// Some start-up work runs on each rank by itself before a collective that needs every rank:
// opening the data or an --init_from_hf folder (each node reads its own copy), rank 0's lock of
// the checkpoint folder. A rank whose work throws would leave the others waiting in that
// collective until --dist_timeout_s, and they would then end naming a timeout, not the cause.
// So after the work every rank says in one all-reduce whether its work threw, and whether as a
// usage error: a rank whose work threw rethrows its own error, and the others stop with one
// that says how many ranks failed and where to read why, a UsageError (exit 2: a launcher does
// not restart it) where some rank's failure was one, else an Error (exit 1). At world 1
// nothing is exchanged.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dist/dist_context.h"

namespace ddptrain {

/// What a rank that did not fail says (Note [A failure on some ranks stops every rank]): given
/// how many ranks failed, the message of its error.
using FailedElsewhere = std::function<std::string(int64_t failed_ranks)>;

/// "2 ranks could not <what> (its log says why)<then>": the message of most FailedElsewhere.
std::string ranks_could_not(int64_t failed_ranks, const std::string& what, const std::string& then = "");

/// Every rank's `mine` (one length on every rank), in rank order: one all_gather (`what` names
/// it). The ranks' comparisons of what they hold (data, units, checkpoints) read it. A collective.
std::vector<std::vector<int64_t>> gathered_values(const DistContext& ctx, const std::vector<int64_t>& mine,
                                                  const char* what);

/// Runs `work` on this rank, then tells every rank whether any rank's work threw (Note [A failure
/// on some ranks stops every rank]; `what` names the collective). `sums` ride in the same
/// all-reduce: the result is their sums over the ranks. A collective.
std::vector<int64_t> on_every_rank(const DistContext& ctx, const char* what,
                                   const std::function<void()>& work, const FailedElsewhere& failed_elsewhere,
                                   std::vector<int64_t> sums = {});

}  // namespace ddptrain
