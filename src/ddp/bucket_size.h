// --bucket_cap_mb auto: the gradient bucket size chosen from what the link costs and how long
// backward runs.
//
// Note [Bucket size from the link]
// A bucket's all-reduce can start only when its last gradient is ready, and the bucket holding
// the first layers' gradients becomes ready only at the very end of backward: whatever that
// bucket costs is exposed. Big buckets (PyTorch's 25 MiB) make that tail long on a slow link:
// on a 1 Gbit/s link MiniResNet's 10.6 MiB gradient is nearly one bucket, and 11% of the step
// waited on it; 1 MiB buckets cut the wait to 2%. Small buckets cost a latency each, which
// only matters when all of them together no longer fit under backward. With the all-reduce
// cost a latency plus a time per byte (measured at start-up on the job's own process group),
// G gradient bytes and backward taking T_b, a cap c leaves exposed about
//     E(c) = latency + c * per_byte + max(0, ceil(G / c) * latency + G * per_byte - T_b)
// (the last bucket's own cost, plus whatever the sum of all the all-reduces does not hide).
// We take the largest candidate cap (fewest collectives, least CPU per step) whose E is within
// a tolerance of the smallest E: max(0.5 ms, 0.5% of T_b). Every rank computes the same cap
// from the same numbers (the measurements are averaged over the ranks first), so every rank
// builds the same buckets (DESIGN.md invariant 1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dist/dist_context.h"

namespace ddptrain {

/// What one all-reduce costs on this job's process group, averaged over the ranks.
struct LinkCost {
  double latency_s = 0;         // a tiny all-reduce
  double seconds_per_byte = 0;  // the growth per byte of a large one
};

struct BucketCapChoice {
  size_t cap_bytes = 25u << 20;
  double exposed_s = 0;  // E(cap) of the Note
  std::string why;       // one line for the log
};

/// The candidate caps, in MiB, smallest first (the largest is PyTorch's default).
constexpr double kBucketCapCandidatesMib[] = {1, 2, 4, 8, 16, 25};

/// Pure: the cap of Note [Bucket size from the link]. backward_s <= 0: unknown (treated as 0).
BucketCapChoice choose_bucket_cap(const LinkCost& link, int64_t grad_bytes, double backward_s);

/// The cap for this job: times all-reduces of 1 KiB and 4 MiB of fp32 on ctx's device (a few
/// each, after a warm-up; the fastest counts), averages those times and every rank's own
/// backward estimate over the ranks, and applies choose_bucket_cap to the averages, so every
/// rank gets the same cap whatever it measured itself. A collective: every rank calls it.
BucketCapChoice agreed_bucket_cap(const DistContext& ctx, int64_t grad_bytes, double backward_s);

}  // namespace ddptrain
