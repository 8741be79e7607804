// Trainer::Impl::Run: what one fit() holds (the data order, the epoch's position and sums,
// the stop vote and the callbacks), shared by trainer.cpp (setup, resume, the schedule) and
// trainer_loop.cpp (the epoch loop). Private: not installed.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "data/distributed_sampler.h"
#include "data/epoch_plan.h"
#include "data/loader.h"
#include "train/checkpoint_policy.h"
#include "train/epoch_summary.h"
#include "train/lr_horizon.h"
#include "train/owed_evaluation.h"
#include "train/run_reporter.h"
#include "train/stop_vote.h"
#include "train/trainer_impl.h"
#include "train/training_modes.h"
#include "train/unreadable_samples.h"

namespace ddptrain {

struct Trainer::Impl::Run {
  Run(const Impl& t, Dataset& data, const Dataset* test_data)
      : train(data),
        test(test_data),
        files(data.files_hash()),
        sampler_options{data.size(), t.ctx_.world_size(), t.ctx_.rank(), true, t.opts_.loop.seed, false},
        sampler(sampler_options),
        loader(data, loader_options(t)),
        batches(loader.num_batches(sampler.num_samples())),
        steps_per_epoch((batches + t.opts_.loop.grad_accum_steps - 1) /
                        t.opts_.loop.grad_accum_steps),  // Note [Partial accumulation groups]
        vote(t.ctx_, t.opts_.stop_requested),
        sums(t.ctx_.device()),
        modes(modes_to_train_in(*t.model_.module)) {}
  static LoaderOptions loader_options(const Impl& t) {
    LoaderOptions lo = t.opts_.data;
    lo.pin_memory = t.ctx_.device().is_cuda();
    return lo;
  }
  Dataset& train;
  const Dataset* test;
  uint64_t files;  // train's Dataset::files_hash, once a run (a text file's is of all its bytes)
  SamplerOptions sampler_options;
  DistributedSampler sampler;
  Loader loader;
  int64_t batches, steps_per_epoch;
  StopVote vote;
  EpochPosition pos;
  EpochSums sums;
  UnreadableSamples unreadable;  // Note [Unreadable samples counted once]
  TrainingModes modes;           // each epoch starts with them (Note [Each module keeps its mode])
  std::vector<std::shared_ptr<Callback>> callbacks;
  std::shared_ptr<CheckpointPolicy> checkpoints;
  std::shared_ptr<RunReporter> reporter;  // the first of callbacks
  int start_epoch = 1;
  int64_t start_micro = 0;
  std::optional<EpochPlan> rest;             // the resumed epoch, planned at another world size
  std::optional<LrHorizon> resumed_horizon;  // the checkpoint's (Note [Schedule horizon])
  double resumed_lr = 0;                     // the learning rate its next step was to have
  int64_t warmup_batch = 0;  // the global batch --warmup_steps counts in; 0: this run's (a fresh one)
  double train_time = 0;
  int64_t skipped_steps_before = 0;    // TrainState::skipped_steps when the epoch began
  std::optional<OwedEvaluation> owed;  // the resumed checkpoint's (Note [Evaluation owed])
};

}  // namespace ddptrain
