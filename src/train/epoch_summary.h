// An epoch's training statistics: per-micro-batch sums kept on the device (no host sync per
// micro-step, as Python DDP loops run; double sums, added in the order host doubles would
// be), then one all-reduce at the epoch's end that also carries every rank's peak tensor
// memory and peak RSS (a slot per rank each) and the samples the datasets skipped.
#pragma once

#include <vector>

#include "dist/dist_context.h"
#include "train/trainable.h"

namespace ddptrain {

class EpochSums {
 public:
  explicit EpochSums(c10::Device device);
  /// One micro-batch: its mean loss (float64, detached) weighed by its counted targets
  /// (Objective::count).
  void add(const at::Tensor& loss_d, const at::Tensor& output, const at::Tensor& targets,
           const Objective& objective);

  struct Summary {
    double train_loss = 0;
    double train_acc = -1;             // -1 without Objective::correct
    std::vector<double> peak_mem_mib;  // per rank; empty where the device has no counter
    std::vector<double> peak_rss_mib;  // per rank
    int64_t skipped_samples = 0;       // reports summed over ranks (one file may be in two)
  };
  /// Over all ranks: a collective. skipped: the samples this rank's dataset replaced this epoch.
  Summary reduce(const DistContext& ctx, bool has_correct, int64_t skipped = 0) const;

 private:
  at::Tensor sums_;  // (sum of loss x counted targets, correct, counted targets)
};

}  // namespace ddptrain
