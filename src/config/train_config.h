// TrainConfig: every option of a training run, with the reference pipeline's names and
// defaults. Options are grouped by concern; defaults live at the declaration.
// Invariant: after resolve_train_config() returns, validate() has passed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/choices.h"
#include "config/flag_table.h"
#include "data/data_options.h"
#include "models/model_options.h"

namespace ddptrain {

struct OptimOptions {
  int epochs = 10;
  double lr = 0.01;
  OptimizerKind optimizer = OptimizerKind::kSgd;
  ScheduleChoice lr_schedule = ScheduleChoice::kAuto;  // auto: sgd epoch_cosine, adamw step_cosine
  long long warmup_steps = 0;  // step_cosine: linear warmup over this many optimizer steps
  double min_lr_ratio = 0.1;   // step_cosine: the final learning rate as a fraction of --lr
  double momentum = 0.9;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double weight_decay = 1e-4;               // adamw: on matrices only (not biases, LayerNorm)
  LossKind loss = LossKind::kCrossEntropy;  // mse: float targets (--dataset tensors)
  int grad_accum_steps = 1;
  long long max_steps = 0;                     // stop after this many optimizer steps; 0 = no limit
  double clip_grad_norm = 0;                   // max global gradient norm (unscaled); 0 = off
  AmpDtype amp_dtype = AmpDtype::kAuto;        // autocast type with --use_amp (train/precision.h)
  ScalerMode grad_scaler = ScalerMode::kAuto;  // auto: with fp16 autocast
  double scaler_init_scale = 65536.0;
  long long scaler_growth_interval = 2000;
};

struct DistOptions {
  std::string backend = "auto";  // auto | gloo | nccl
  int dist_timeout_s = 600;      // every collective and the rendezvous
  int flight_recorder = 64;  // collectives each rank remembers for a hang's verdict (Note [Flight recorder])
  std::optional<double> bucket_cap_mb;  // all-reduce bucket size cap, MiB; nullopt = auto (ddp/bucket_size.h)
  double first_bucket_mb = 1.0;         // the first bucket (reduced first, from the last layers)
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  bool sync_bn = false;  // BatchNorm statistics over the global batch
  CommHook ddp_comm_hook = CommHook::kNone;
  bool ddp_overlap = true;    // all-reduce during backward (false: after it)
  bool accum_no_sync = true;  // accumulation: reduce once per step (false: per micro-batch)
  int zero_stage = 0;         // 1: optimizer state sharded over the ranks (Note [ZeRO stage 1])
};

struct RunOptions {
  bool use_amp = true;
  std::string checkpoint_dir = "./checkpoints";
  int save_every = 1;                // epochs; 0 = only at the end
  long long save_every_steps = 0;    // optimizer steps; 0 = off
  int keep_checkpoints = 3;          // newest complete checkpoints kept; 0 = all
  std::string resume_from;           // a checkpoint directory, or "auto": the newest valid one
  std::string init_from;             // weights to start from (a state_dict file); a resume wins
  int eval_every = 1;                // epochs between evaluations (and after the last); 0 = never
  std::string metrics_file;          // JSON lines of every step line and epoch (rank 0)
  std::string tensorboard_dir;       // TensorBoard scalar event files (rank 0)
  double peak_tflops = 0;            // hardware peak per rank for MFU; 0 = table or CPU probe
  std::string trace_samples_dir;     // when set: "epoch E micro M: i i ..." per micro-batch, per rank
  bool checkpoint_on_signal = true;  // SIGTERM/SIGINT: finish the step, save, exit 128+sig
  bool keep_global_batch =
      false;  // a resume at another world size changes accumulation instead of the global batch
  int log_interval = 10;
  bool enable_profiling = false;
  long long seed = 42;
  int threads = 0;  // intra-op threads per rank; 0 = cores / local_world_size
  /// Freed CPU heap kept for the next step (Note [CPU heap kept across steps]); 0 = glibc's
  /// policy; -1 = 1024 at zero_stage 0, the lean heap under ZeRO (memory is the point there).
  int cpu_heap_keep_mb = -1;
  std::string config;  // the TOML file the run was read from, if any
};

struct TrainConfig {
  DataOptions data;
  ModelOptions model;
  OptimOptions optim;
  DistOptions dist;
  RunOptions run;

  /// Throws UsageError naming the flag, the value and the fix for the first bad value.
  void validate() const;
  /// --lr_schedule with auto resolved: step_cosine for adamw, epoch_cosine for sgd.
  ScheduleChoice effective_lr_schedule() const;
};

/// The one flag table of `ddptrain train`, bound to the fields of c.
std::vector<Flag> train_flags(TrainConfig& c);

/// Defaults, then the --config TOML file (if given), then the flags. Validated.
TrainConfig resolve_train_config(const std::vector<std::string>& args);

/// The usage line of `ddptrain train`.
extern const char* const kTrainUsage;

}  // namespace ddptrain
