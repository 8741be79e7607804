// The Trainer: trains any module (train/trainable.h) with DistributedDataParallel on every
// rank of a DistContext, with everything `ddptrain train` has: accumulation under no_sync,
// autocast and the loss scaler, clipping, learning-rate schedules, evaluation, atomic
// checkpoints and exact resume, the agreed stop, step lines, metrics JSONL, TensorBoard, the
// progress bar, MFU. `ddptrain train` is one client (config/train_from_config.h).
//
// The loop reads top to bottom: fit() resumes (if asked), then per epoch trains its
// micro-batches (train/train_step.h: forward and loss, backward, the optimizer step), lets
// the ranks vote on stopping after each step (Note [Agreed stop]), summarises the epoch over
// the ranks, evaluates, and hands every event to the callbacks (train/callbacks.h: the
// reporter, the traces, the user's own, then the checkpoint policy, so that a step's or a
// stop's checkpoint holds what the user's callbacks made of that step; an epoch's checkpoint
// is saved before its evaluation, after on_epoch_trained: state a checkpoint part keeps is
// best updated in on_step_end or on_epoch_trained).
// Every rank constructs the Trainer and calls fit() with the same options: both run the same
// collectives in the same order on every rank (DESIGN.md invariant 1).
// The Trainer sets nothing process-wide: threads, seeds and signal handlers are the program's
// (TrainerOptions::stop_requested carries the last in); fault injection reaches it through
// set_loop_hooks (tests only).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "data/datasets.h"
#include "dist/dist_context.h"
#include "train/callbacks.h"
#include "train/trainable.h"
#include "train/trainer_options.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace ddptrain {

class DistributedDataParallel;
struct CheckpointFolderClaim;
class LoopHooks;
struct Precision;

struct TrainResult {
  double test_accuracy = -1;  // of the last evaluation; -1 without one (or without Objective::correct)
  double test_loss = -1;
  bool evaluated = false;       // an evaluation completed
  double train_loss = 0;        // mean over all ranks of the last epoch's micro-batch losses (this run's)
  std::string last_epoch_part;  // "micro-batches 11-16 of 16 of epoch 1" when this run trained part of it
  int64_t global_step = 0;
  int64_t run_steps = 0;     // optimizer steps this run took (0: it trained nothing)
  double samples_per_s = 0;  // global, over the whole run's training steps
  std::string last_checkpoint;
  std::string fingerprint;            // hash of all parameters and buffers (train/fingerprint.h)
  std::string optimizer_fingerprint;  // hash of the optimizer's state (under zero_stage >= 1 from the shards:
                                      // a collective)
  std::string nothing_to_train;       // why a resumed run had nothing left to train, or ""
  int stopped_by_signal = 0;          // the signal that stopped training early, or 0
  int stop_requested_by = -1;         // the rank that received it: this rank where it did, else
                                      // the lowest that did (Note [Agreed stop])
};

class Trainer {
 public:
  /// Measures what the options leave to measurement (precision, bucket size: collectives)
  /// and wraps the module in DDP (a broadcast from rank 0). `optimizer` is over the module's
  /// parameters; each group's learning rate now is its base of the schedule (and part of the
  /// run's identity): give another Trainer a fresh optimizer, or one with its rates set back,
  /// not one a fit() has scheduled.
  /// The Trainer claims opts.checkpoint.dir (Note [A run claims its checkpoint folder],
  /// train/folder_claim.h: rank 0's lock, leftovers put back, the checkpoint to resume chosen
  /// and verified, an abandoned branch marked) and holds the claim until its fit() ends; a
  /// program whose start-up is slow claims first and gives it `claim` (made with these options;
  /// the Trainer checks its choice by the Trainer's whole identity). fit() sets the branch aside
  /// once nothing refuses the run (the resumed checkpoint loaded, the data checked).
  Trainer(const DistContext& ctx, Trainable model, torch::optim::Optimizer& optimizer,
          TrainerOptions opts = {}, Objective objective = Objective::classification(),
          std::shared_ptr<CheckpointFolderClaim> claim = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Called after the reporter and the traces and before the checkpoint policy, in the order added.
  void add_callback(std::shared_ptr<Callback> callback);
  /// Test-only: the hooks where a failure test breaks the loop (train/loop_hooks.h).
  void set_loop_hooks(std::shared_ptr<LoopHooks> hooks);
  /// One more part in every checkpoint the Trainer saves and resumes from (besides "model"
  /// and "optimizer"; checkpoint/checkpoint.h), e.g. an EMA module or tensors of yours.
  void add_checkpoint_part(CheckpointPart part);
  /// Trains on `train` (evaluating on `test` when given) until the last epoch, max_steps or an
  /// agreed stop; resumes first when opts.checkpoint.resume_from names a checkpoint. Once per
  /// Trainer (a UsageError the second time): a Trainer is one run, its position, schedule and
  /// resume that run's; another run is another Trainer (init_from or resume_from say where
  /// it starts). A program that ends on an error it throws tells the other ranks
  /// (DistContext::announce_failure; Note [A rank's failure ends the job]).
  TrainResult fit(Dataset& train, const Dataset* test = nullptr);

  /// The precision it trains in (chosen at construction: train/precision.h).
  const Precision& precision() const;
  /// The DDP wrapper of the module (ddp/ddp.h).
  DistributedDataParallel& ddp();

 private:
  struct Impl;  // the machinery: train/trainer_impl.h
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddptrain
