// TrainerOptions: how the Trainer trains a model it is given, one options struct per part of
// it (the loop, the data loader, the optimization, precision, DDP, sharding, checkpoints,
// what it reports), each default declared once, at its field. The model, the data, the loss
// and the optimizer are the Trainer's arguments, not options. `ddptrain train` binds its
// flags straight to these fields (config/train_config.h); a library user sets what they
// need. validate() names a bad field (Note [Options named by their field], util/error.h).
// Nothing here is process-wide: intra-op threads, seeds of the model's initialisation and
// signal handlers belong to the program (stop_requested is how a program's handler reaches
// the Trainer).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "data/loader_options.h"
#include "ddp/ddp_options.h"
#include "train/lr_schedule.h"
#include "train/precision_options.h"
#include "train/run_identity.h"

namespace ddptrain {

/// Samples per optimizer step over all ranks: the one formula.
inline int64_t global_batch(int64_t batch_size, int64_t grad_accum_steps, int64_t world_size) {
  return batch_size * grad_accum_steps * world_size;
}

/// How long to train and how the micro-batches make a step.
struct LoopOptions {
  int epochs = 10;           // passes over the training data; 0: fit() trains nothing
  int64_t max_steps = 0;     // stop after this many optimizer steps in all (resumes count on); 0 = none
  int grad_accum_steps = 1;  // micro-batches per optimizer step
  int eval_every = 1;        // epochs between evaluations (and after the last); 0 = never
  uint64_t seed = 42;        // the sampler's shuffle, the same on every rank
  /// A resume at another world size keeps the checkpoint's global batch by changing
  /// grad_accum_steps (an OptionError when it cannot: not a multiple of batch_size x world).
  bool keep_global_batch = false;
};

/// What the Trainer does around the optimizer it is given.
struct OptimOptions {
  LrSchedule lr_schedule = LrSchedule::kAuto;
  int64_t warmup_steps = 0;   // kStepCosine: optimizer steps of linear warmup
  double min_lr_ratio = 0.1;  // kStepCosine: the last step's learning rate over the base
  double clip_grad_norm = 0;  // max global norm (unscaled) of the optimizer's gradients; 0 = off
};

/// Checkpoints (checkpoint/checkpoint.h) and resuming from one.
struct CheckpointOptions {
  std::string dir = "./checkpoints";  // where rank 0 writes them; "" = none
  int save_every = 1;                 // epochs; 0 = only at the end
  int64_t save_every_steps = 0;       // optimizer steps; 0 = off
  int keep = 3;                       // newest complete checkpoints kept; 0 = all
  /// A checkpoint directory to continue from; "" = a fresh start; "auto": this run's newest
  /// valid checkpoint in `dir`, if any (Note [Run identity]).
  std::string resume_from;
  /// With resume_from "auto": the checkpoint directory to continue from when `dir` holds none of
  /// this run's, or only earlier ones ("" = a fresh start then); checked (verified, and refused
  /// as an explicit resume_from is) before auto chooses. `ddptrain launch` passes the first
  /// attempt's resume_from here when it restarts a group that was resuming from elsewhere.
  std::string resume_fallback;
  /// On a restart (TORCHELASTIC_RESTART_COUNT > 0: torchrun's agent or `ddptrain launch`
  /// restarted the workers with the same options), continue this run's newest checkpoint in
  /// `dir` (resume_from "auto", the given resume_from as its fallback): else a restart went back
  /// to the first attempt's start and set that attempt's progress aside. `ddptrain train`
  /// applies the same rule before it builds anything, and turns this off.
  bool resume_on_restart = true;
  /// Weights to start from when not resuming: a state_dict of torch.save (a DDP model's
  /// "module." prefix removed), a model.pt, or a .safetensors file (checkpoint/weights_file.h).
  std::string init_from;
  bool on_signal = true;  // a stop request saves before returning
};

/// What the Trainer reports, and where.
struct ReportOptions {
  int log_interval = 10;          // optimizer steps between step lines (each is a collective)
  std::string metrics_file;       // JSON lines (rank 0)
  std::string tensorboard_dir;    // TensorBoard scalars (rank 0)
  std::string trace_samples_dir;  // "epoch E micro M: i i ..." per micro-batch, per rank
  bool enable_profiling = false;  // a Chrome trace of some steps, in checkpoint.dir
  int profile_first_step = 3;     // the first profiled step of the run, counted from 1 (>= 2)
  int profile_steps = 3;          // how many steps are profiled
  double peak_tflops = 0;         // per rank, for MFU; 0 = the device table or the CPU probe
};

struct TrainerOptions {
  LoopOptions loop;
  LoaderOptions data;  // data/loader_options.h
  OptimOptions optim;
  PrecisionOptions precision;  // train/precision_options.h; on CPU "auto" measures the CPU
  DdpOptions ddp;              // ddp/ddp_options.h
  ZeroOptions zero;            // ddp/ddp_options.h
  CheckpointOptions checkpoint;
  ReportOptions report;
  bool channels_last = false;  // 4-d weights and inputs NHWC (Note [Channels last])
  RunIdentity run_identity;  // saved in meta.json; a resume continues only the same run (Note [Run identity])
  std::string config_json = "{}\n";  // saved as config.json in each checkpoint
  /// A program's stop request: a nonzero signal number makes every rank stop after the same
  /// step (Note [Agreed stop]); null = never asked.
  std::function<int()> stop_requested;

  /// OptionError naming the first bad field, its value and the fix.
  void validate() const;
  /// Samples per optimizer step over `world_size` ranks.
  int64_t global_batch(int world_size) const {
    return ddptrain::global_batch(data.batch_size, loop.grad_accum_steps, world_size);
  }
};

/// lr_schedule with auto resolved: step_cosine for AdamW, epoch_cosine otherwise.
LrSchedule resolved_schedule(LrSchedule s, bool adamw);

}  // namespace ddptrain
