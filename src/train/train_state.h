// TrainState: what a checkpoint saves (the module, the optimizer, the loss scaler, the
// position in the data and the optimizer step count) and where the loop stands. The Trainer
// owns it; callbacks read it.
#pragma once

#include <cstdint>
#include <optional>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "data/epoch_plan.h"
#include "train/grad_scaler.h"
#include "train/lr_horizon.h"

namespace ddptrain {

class FullyShardedParams;
class ShardedOptimizer;

struct TrainState {
  torch::nn::Module& module;
  torch::optim::Optimizer& optimizer;
  GradScaler& scaler;
  ShardedOptimizer* sharded = nullptr;  // --zero_stage 1: steps instead of optimizer (Note [ZeRO stage 1])
  const FullyShardedParams* fsdp = nullptr;  // --zero_stage 3: holds the parameters (Note [ZeRO stage 3])
  int64_t global_step = 0;                   // optimizer steps taken, over all runs of a resumed job
  int epoch = 1;                             // the epoch being trained (1-based)
  int64_t micro_done = 0;                    // micro-batches of that epoch trained
  int64_t run_steps = 0;                     // optimizer steps taken by this run
  int64_t skipped_steps = 0;                 // of this run, on inf/NaN gradients
  at::Tensor last_grad_norm = {};            // of the last step, when clipping is on (0-dim, on the
                                             // device: read at log lines, Note [No host sync in a step])
  int64_t grad_bytes = 0;                    // of the parameters' gradients at the last optimizer step
  int stopped_by_signal = 0;                 // the agreed stop's signal, or 0
  int stop_requested_by = -1;                // the rank that received it (this one where it did)
  double step_save_s = 0;                    // this run's seconds in step checkpoints, which the
                                             // step lines' rates leave out
  // Note [Resume at another world size]: the epoch's order, and what was done of it before this
  // run's part; the schedule's steps taken at another global batch, in this one's; the world
  // size of the checkpoint resumed from when it differs (else 0) and what it left of its epoch.
  EpochPlan plan = {};
  double lr_step_offset = 0;
  int resumed_from_world = 0;
  int64_t samples_left_in_epoch = 0;
  // Note [Schedule horizon]: where this run's schedule ends, and what a resume changed of the
  // checkpoint's.
  LrHorizon lr_horizon = {};
  std::optional<LrHorizonChange> lr_change = {};
};

}  // namespace ddptrain
