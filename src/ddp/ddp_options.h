// DdpOptions and ZeroOptions: what a user chooses of DDP and of sharding; no LibTorch here
// (the CLI's flags bind to them).
#pragma once

#include <optional>

#include "ddp/comm_hook.h"

namespace ddptrain {

/// What a user chooses of DDP (TrainerOptions::ddp; `ddptrain train`'s DDP flags), PyTorch's
/// DistributedDataParallel arguments; the Trainer turns them into a DdpSetup.
struct DdpOptions {
  std::optional<double> bucket_cap_mb;   // all-reduce bucket cap, MiB; nullopt: chosen from the link
                                         // (Note [Bucket size from the link])
  double first_bucket_mb = 1.0;          // the first bucket (reduced first, from the last layers)
  bool gradient_as_bucket_view = false;  // gradients are views into the flat buckets
  bool find_unused_parameters = false;   // as PyTorch's: a parameter without a gradient in a backward
                                         // adds what it accumulated (or zero); unused by all: no gradient
  bool broadcast_buffers = true;         // rank 0's buffers before each training forward
  CommHook comm_hook = CommHook::kNone;  // gradients compressed for the all-reduce
  bool overlap = true;                   // all-reduce during backward (false: after it)
  bool accum_no_sync = true;             // accumulation all-reduces once per step (false: per micro-batch)

  /// OptionError naming the field (Note [Options named by their field], util/error.h).
  void validate() const;
};

/// Sharding (TrainerOptions::zero; `ddptrain train --zero_stage`).
struct ZeroOptions {
  int stage =
      0;  // 1: optimizer state sharded, 2: gradients too, 3: parameters too (Notes [ZeRO stage 1/2/3])

  /// OptionError naming the field; `ddp` for the stages that keep only a gradient shard.
  void validate(const DdpOptions& ddp) const;
};

}  // namespace ddptrain
