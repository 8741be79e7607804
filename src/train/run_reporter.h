// RunReporter: what a run tells while it trains, as a callback: the "run" record at the start,
// a step line every log_interval optimizer steps (the loss averaged over the ranks: an
// all-reduce every rank makes at the same steps), or the progress bar on a terminal; the
// epoch line; the same numbers as metrics JSON lines and TensorBoard scalars (rank 0 writes).
#pragma once

#include <cstdint>
#include <string>

#include "ddp/ddp.h"
#include "dist/dist_context.h"
#include "obs/metrics.h"
#include "obs/mfu.h"
#include "obs/progress.h"
#include "obs/tensorboard.h"
#include "train/callbacks.h"
#include "train/precision.h"
#include "train/step_timer.h"
#include "train/trainer_options.h"

namespace ddptrain {

/// What the reporter is told once, at the start.
struct RunFacts {
  Precision precision;
  PeakFlops peak;
  int64_t flops_per_sample = 0;
  int64_t tokens_per_sample = 0;  // token data: tokens per sample (tokens/s and "val" lines); 0 for images
  int threads_per_rank = 1;
  int64_t loaded_peak_bytes = -1;      // of the device's tensors, building and loading the model
  int64_t loaded_peak_rss_bytes = -1;  // the process's resident set then (VmHWM)
  int restart_count = 0;               // the job's restart, as its ranks agreed (CheckpointFolderClaim)
  bool same_torchrun_job = false;      // a start of the torchrun job that started last in the folder
};

class RunReporter : public Callback {
 public:
  RunReporter(const DistContext& ctx, const TrainerOptions& opts, DistributedDataParallel& ddp,
              StepTimer& timer, RunFacts facts, const TrainState& state);

  void on_epoch_begin(const TrainState&, const EpochPosition&) override;
  void on_micro_batch(const TrainState&, const MicroBatchEvent& e) override;
  void on_step_end(const TrainState& s, const StepEvent& e) override;
  void on_epoch_trained(const TrainState&) override { progress_.finish(); }
  void on_epoch_end(const TrainState& s, const EpochEvent& e) override;
  /// The samples every rank trained in this run, summed over the ranks (each step line's
  /// all-reduce carries them: the last micro-batch of an epoch may be short, and the rest of an
  /// epoch resumed at another world size uneven), up to the last step line.
  int64_t samples_trained() const { return samples_trained_; }

 private:
  void update_progress(const TrainState& s, const StepEvent& e);
  void report_interval(const TrainState& s, const StepEvent& e);
  std::string epoch_line(const TrainState& s, const EpochEvent& e) const;
  void to_tensorboard(const char* group, const nlohmann::json& rec, int64_t step);

  const DistContext& ctx_;
  const TrainerOptions& opts_;
  DistributedDataParallel& ddp_;
  StepTimer& timer_;
  RunFacts facts_;
  MetricsWriter metrics_;
  ProgressBar progress_;
  TensorBoardWriter tensorboard_;
  at::Tensor interval_loss_;  // sum of the micro-batch losses since the last step line (device)
  int64_t interval_micro_ = 0, interval_steps_ = 0;
  int64_t interval_samples_ = 0;  // this rank's since the last step line
  int64_t epoch_samples_ = 0;     // this rank's in this run's part of the epoch: the progress bar's rate
  int64_t samples_trained_ = 0;
  Clock::time_point interval_t0_;
  double save_s_at_t0_ = 0;  // TrainState::step_save_s when the interval began
};

/// "micro-batches 11-16 of 16 of epoch 1": the part of an epoch a run trained.
std::string epoch_part(int epoch, int64_t first_micro, int64_t micro_done, int64_t batches);

}  // namespace ddptrain
