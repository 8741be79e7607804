// What a run measures before training, and what it decides from it: the precision (Note
// [Precision chosen by measurement]), the peak FLOP rate for MFU, and DDP's bucket size
// (Note [Bucket size from the link]). Collectives where the choice must agree: every rank
// calls these in the same order.
#pragma once

#include <cstdint>

#include "ddp/ddp.h"
#include "ddp/units.h"
#include "obs/mfu.h"
#include "train/precision.h"
#include "train/trainer_options.h"

namespace ddptrain {

struct StartMeasurements {
  Precision precision;
  PeakFlops peak;         // for MFU
  double backward_s = 0;  // estimated, for the bucket size; 0 when unknown
  /// The device's peak of allocated bytes before the kernel probe (whose tensors are not the
  /// model's: the count restarts after it); -1 where not measured.
  int64_t peak_bytes_before_probe = -1;
};

/// The kernel probe (skipped where neither MFU nor --amp_dtype auto needs it), the agreed
/// precision, the peak and the backward estimate, logged. `resumed_precision`: the one a
/// resumed checkpoint recorded ("" for a fresh start); convolutional: the model's weights are
/// mostly 4-D (obs/mfu.h gpu_peak_kind).
StartMeasurements measure_start(const TrainerOptions& o, const DistContext& ctx, int64_t flops_per_sample,
                                const std::string& resumed_precision, bool convolutional = false);

/// What DDP is built with, from the options; without a bucket size, measures the link (a
/// collective when world > 1). units: the module's (Note [Units]), for zero_stage 3's buckets;
/// may be null.
DdpSetup ddp_setup(const TrainerOptions& o, const DistContext& ctx, const torch::nn::Module& module,
                   const Units* units, double backward_s);

}  // namespace ddptrain
