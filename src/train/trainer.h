// The trainer: the step loop of one rank. Reads top to bottom: build model (same seed on
// every rank), wrap in DDP, build data, resume if asked, then per epoch: train, evaluate,
// log, checkpoint, step the LR schedule. Every rank runs the same collectives in the same
// order (the loss reductions at log steps, DDP, evaluation, checkpoint barriers).
#pragma once

#include <cstdint>
#include <string>

#include "config/train_config.h"
#include "dist/dist_context.h"

namespace ddptrain {

struct TrainResult {
  double test_accuracy = -1;  // of the last evaluation; -1 when the dataset has no test split
  double test_loss = -1;
  double train_loss = 0;      // mean over all ranks of the last epoch's micro-batch losses (this run's)
  std::string last_epoch_part;  // "micro-batches 11-16 of 16 of epoch 1" when this run trained part of it
  int64_t global_step = 0;
  double samples_per_s = 0;   // global, over the whole run's training steps
  std::string last_checkpoint;
  std::string fingerprint;       // hash of all parameters and buffers (see state_fingerprint)
  std::string nothing_to_train;  // why a resumed run had nothing left to train, or ""
  int stopped_by_signal = 0;     // the signal that stopped training early, or 0
};

/// Runs the configured training on this rank.
TrainResult train(const TrainConfig& cfg, const DistContext& ctx, const std::string& config_json);

}  // namespace ddptrain
