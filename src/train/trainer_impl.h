// Trainer::Impl: the Trainer's machinery (train/trainer.h holds only what a user touches):
// its options as it runs them, the measurements of the start, DDP and the shards, the loss
// scaler, the state a checkpoint saves, the step timer, the callbacks and the test hooks.
// The loop's functions are its members, defined in train/trainer.cpp (setup, resume, the
// schedule) and train/trainer_loop.cpp (the epoch loop); what one fit() holds: trainer_run.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/optim/optimizer.h>

#include "ddp/ddp.h"
#include "ddp/fully_sharded.h"
#include "ddp/zero_optimizer.h"
#include "train/folder_claim.h"
#include "train/grad_scaler.h"
#include "train/loop_hooks.h"
#include "train/start_measurements.h"
#include "train/step_timer.h"
#include "train/stop_request.h"
#include "train/train_state.h"
#include "train/trainer.h"

namespace ddptrain {

struct Trainer::Impl {
  Impl(const DistContext& ctx, Trainable model, torch::optim::Optimizer& optimizer, TrainerOptions opts,
       Objective objective, std::shared_ptr<CheckpointFolderClaim> claim);
  TrainResult fit(Dataset& train, const Dataset* test);

  struct Run;
  bool resume(Run& run, TrainResult& result);
  void accept_run();
  void describe_data(Run& run);
  bool stop_during_start(Run& run);
  void plan_schedule(Run& run);
  double schedule_position() const;
  int64_t start_epoch_data(Run& run, int epoch);
  bool train_epoch(Run& run);
  bool step(Run& run, int64_t& step_in_epoch, const at::Tensor& loss);
  bool finish_epoch(Run& run, bool stopping, TrainResult& result);
  void summarize_epoch(Run& run, EpochEvent& e, TrainResult& result);
  void evaluate_epoch(Run& run, EpochEvent& e, TrainResult& result);
  bool make_owed_evaluation(Run& run, TrainResult& result);
  void evaluation_made_for(int epoch, const EvalResult& ev);
  void enter(Run& run, StepTimer::Phase p);  // Note [Loop phases]
  /// Every parameter group's learning rate at `position` of the schedule, each from its own
  /// initial rate (as PyTorch's schedulers, from each group's initial_lr).
  void schedule_lrs(double position);
  void record_stop(const StopRequest& agreed, int local_signal);
  std::string stop_origin() const;
  void end_phase(Run& run);
  void shard_parameters();
  void shard_optimizer();
  void gather_parameters();
  std::string optimizer_fingerprint_hex();
  std::vector<std::shared_ptr<Callback>> callbacks_for(Run& run);

  const DistContext& ctx_;
  std::string resumed_precision_;  // what the resumed checkpoint recorded ("" fresh): set by opts_'s check
  // Before opts_ (which makes it where the program gave none), so released after every save.
  std::shared_ptr<CheckpointFolderClaim> claim_;  // Note [A run claims its checkpoint folder]
  TrainerOptions opts_;  // before model_: checked, then the initial weights it names are loaded
  Trainable model_;
  torch::optim::Optimizer& optimizer_;
  Objective objective_;
  double base_lr_ = 0;                 // group 0's initial learning rate (the step lines' and the log's)
  std::vector<double> group_base_lr_;  // each group's: the schedule scales each from its own
  StartMeasurements start_;
  int64_t loaded_peak_bytes_ = -1;  // building, loading and sharding the model (the run record)
  int64_t loaded_peak_rss_bytes_ = -1;
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<FullyShardedParams> fsdp_;   // zero_stage 3 (Note [ZeRO stage 3])
  bool fitted_ = false;                        // fit() runs once (trainer.h)
  std::unique_ptr<ShardedOptimizer> sharded_;  // zero_stage >= 1 (Note [ZeRO stage 1])
  GradScaler scaler_;
  TrainState state_;
  StepTimer timer_;
  std::vector<std::shared_ptr<Callback>> user_callbacks_;
  std::vector<CheckpointPart> parts_;  // what a checkpoint saves and a resume loads
  std::shared_ptr<LoopHooks> hooks_ = std::make_shared<LoopHooks>();
};

}  // namespace ddptrain
