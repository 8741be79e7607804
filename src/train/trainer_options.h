// TrainerOptions: how the Trainer trains a model it is given (the loop, the optimization,
// DDP, checkpoints, what it reports), with defaults at the declaration. The model, the data,
// the loss and the optimizer are the Trainer's arguments, not options. `ddptrain train` fills
// these from its flags (train/train_from_config.h); a library user sets what they need.
// Nothing here is process-wide: intra-op threads, seeds of the model's initialisation and
// signal handlers belong to the program (stop_requested is how a program's handler reaches
// the Trainer).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "ddp/reducer.h"
#include "train/precision.h"
#include "util/fault.h"

namespace ddptrain {

/// The learning rate over training, from the optimizer's learning rate when the Trainer is
/// built (the base): constant; cosine per epoch (the reference pipeline's CosineAnnealingLR);
/// or linear warmup then cosine per optimizer step (GPT-2's). See train/optimizer.h.
enum class LrSchedule { kConstant, kEpochCosine, kStepCosine };

struct TrainerOptions {
  // The loop.
  int epochs = 1;
  int64_t max_steps = 0;      // stop after this many optimizer steps in all (resumes count on); 0 = none
  int batch_size = 32;        // per rank and micro-batch
  int grad_accum_steps = 1;   // micro-batches per optimizer step
  bool accum_no_sync = true;  // accumulation all-reduces once per step (false: per micro-batch)
  // The data.
  int num_workers = 2;         // loader threads; 0 = in the training thread
  int prefetch_factor = 2;     // batches each loader thread prepares ahead
  bool drop_last = true;       // each epoch's last partial batch per rank is dropped (false: trained)
  uint64_t seed = 42;          // the sampler's shuffle, the same on every rank
  bool channels_last = false;  // 4-d weights and inputs NHWC (Note [Channels last])
  // The optimization.
  LrSchedule lr_schedule = LrSchedule::kConstant;
  int64_t warmup_steps = 0;    // kStepCosine
  double min_lr_ratio = 0.1;   // kStepCosine: the last step's learning rate over the base
  double clip_grad_norm = 0;   // max global gradient norm (unscaled); 0 = off
  PrecisionRequest precision;  // autocast (train/precision.h); on CPU "auto" measures the CPU
  double scaler_init_scale = 65536.0;
  int64_t scaler_growth_interval = 2000;
  // DDP (ddp/ddp.h).
  std::optional<double> bucket_cap_mb;  // nullopt: chosen from the link (Note [Bucket size from the link])
  double first_bucket_mb = 1.0;
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  CommHook comm_hook = CommHook::kNone;
  bool ddp_overlap = true;
  int zero_stage =
      0;  // 1: optimizer state sharded, 2: gradients too, 3: parameters too (Notes [ZeRO stage 1/2/3])
  // Checkpoints (checkpoint/checkpoint.h).
  std::string checkpoint_dir = "./checkpoints";
  int save_every = 1;                // epochs; 0 = only at the end
  int64_t save_every_steps = 0;      // optimizer steps; 0 = off
  int keep_checkpoints = 3;          // newest complete checkpoints kept; 0 = all
  std::string resume_from;           // a verified checkpoint directory to continue from; "" = a fresh start
  bool checkpoint_on_signal = true;  // a stop request saves before returning
  std::map<std::string, std::string> run_identity;  // saved in meta.json (Note [Run identity])
  std::string config_json = "{}\n";                 // saved as config.json in each checkpoint
  // What it reports.
  int log_interval = 10;          // optimizer steps between step lines (each is a collective)
  int eval_every = 1;             // epochs between evaluations (and after the last); 0 = never
  std::string metrics_file;       // JSON lines (rank 0)
  std::string tensorboard_dir;    // TensorBoard scalars (rank 0)
  std::string trace_samples_dir;  // "epoch E micro M: i i ..." per micro-batch, per rank
  bool enable_profiling = false;  // a Chrome trace of some steps, in checkpoint_dir
  double peak_tflops = 0;         // per rank, for MFU; 0 = the device table or the CPU probe
  /// A program's stop request: a nonzero signal number makes every rank stop after the same
  /// step (Note [Agreed stop]); null = never asked.
  std::function<int()> stop_requested;
  FaultPlan faults;  // fault injection of the failure tests (util/fault.h); none by default
};

}  // namespace ddptrain
