// Note [Resume at another world size]
// An epoch's samples are consumed in one global order: PyTorch's sampler at the world size W
// the epoch started at pads the shuffled indices to a multiple of W, and rank r reads positions
// r, r+W, r+2W, ...; with drop_last batches of B, the epoch trains the first
// end = (num_samples / B) * B * W positions (without drop_last, all num_samples * W). After m micro-batches
// on every rank the positions [0, m*B*W) are done: a prefix, whatever the rank. So a checkpoint records the
// plan (W, B, end) and the prefix done, and a job of another world size W' continues the epoch with the rest:
// positions [done, end) of the same order, padded to a multiple of W' by repeating from its
// start (as PyTorch pads) and dealt out the same way (rank r' reads r', r'+W', ...), in batches
// of this run's size, the last one possibly smaller (the same on every rank). Its progress is
// again a prefix of that rest, so a checkpoint taken while finishing the epoch at W' records
// the same plan with a larger prefix, and resumes at any size again. Later epochs use PyTorch's
// sampler at W'. A resume at the epoch's own world size with a position of whole batches takes
// the usual path (the sampler's indices from that batch on: bitwise as an uninterrupted run).
#pragma once

#include <cstdint>
#include <vector>

#include "data/distributed_sampler.h"

namespace ddptrain {

struct EpochPlan {
  int world = 1;         // the world size the epoch's order was cut for (its padding)
  int64_t batch = 1;     // the per-rank batch of that world (its drop_last)
  int64_t end = 0;       // positions of the order the epoch trains
  int64_t done = 0;      // positions trained before this run's part of the epoch
  int64_t samples = -1;  // the training set's size the order was drawn over (-1: not recorded)
  uint64_t files = 0;    // the set's Dataset::files_hash (0: not recorded, or not known)

  /// The plan of an epoch that starts at world w with batch b over n samples (drop_last: each
  /// rank's last partial batch is not trained).
  static EpochPlan fresh(int64_t n, int w, int64_t b, bool drop_last = true);
  /// Positions done after this run trained `micro` micro-batches of `batch` per rank at `world`.
  int64_t done_after(int64_t micro, int world_now, int64_t batch_now) const;
  /// The samples each of `world_now` ranks trains of the rest (rest_of_epoch's length).
  int64_t rest_per_rank(int world_now) const { return (end - done + world_now - 1) / world_now; }
  /// Its batches of `batch_now` per rank, the last one possibly smaller.
  int64_t rest_batches(int world_now, int64_t batch_now) const {
    return (rest_per_rank(world_now) + batch_now - 1) / batch_now;
  }
};

/// Rank `rank`'s indices for the rest of the epoch (positions [plan.done, plan.end) of the order
/// that `sampler` opts at plan.world give), dealt over `world` ranks.
std::vector<int64_t> rest_of_epoch(SamplerOptions opts, int64_t epoch, const EpochPlan& plan, int world,
                                   int rank);

}  // namespace ddptrain
