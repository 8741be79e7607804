// Note [Unreadable samples counted once]
// A dataset that replaces a sample it cannot read (bad_images=skip) reports it once per rank
// (Dataset::take_skipped). Two ranks can meet the same file: rank A's sample i, and rank B's
// i-1 replaced by the next sample, i; or, in a later epoch's order, the rank that did not find
// it yet. Summing each rank's reports counted such a file twice. So the epoch's count is of
// distinct reports over all ranks and all epochs of this fit: the ranks all-gather 64-bit
// hashes of their reports, only in an epoch where some rank reported one (the epoch summary's
// sum of reports, the same on every rank, says so: every rank joins, or none does). A rank logs
// only what no rank reported in an earlier epoch.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "dist/dist_context.h"

namespace ddptrain {

class UnreadableSamples {
 public:
  /// Logs this rank's new reports and returns how many distinct reports, over all ranks, no
  /// earlier epoch counted. `reported_anywhere`: this epoch's reports summed over the ranks
  /// (a collective when > 0).
  int64_t count_new(const DistContext& ctx, const std::vector<std::string>& mine, int64_t reported_anywhere,
                    const char* what);

 private:
  std::set<int64_t> counted_;  // hashes of the reports counted so far (the same on every rank)
};

}  // namespace ddptrain
