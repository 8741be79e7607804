// StepReport: the numbers of one logging interval (the optimizer steps since the previous
// step line), and the two ways they leave the trainer: the human step line and the metrics
// record (JSON lines and TensorBoard). Pure formatting: the trainer gathers the numbers.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "ddp/reducer.h"
#include "obs/memory.h"
#include "train/step_timer.h"

namespace ddptrain {

struct StepReport {
  int epoch = 0;
  int64_t step_in_epoch = 0, steps_per_epoch = 0;  // of the epoch (a resumed one: of its rest)
  int64_t global_step = 0, last_step = 0;  // of the whole run, resumes counted (last: unless stopped early)
  double steps = 1;                        // optimizer steps in the interval
  double seconds = 0;                      // the interval's wall time, less checkpoint_s
  double checkpoint_s = 0;                 // in step checkpoints saved during the interval
  double loss = 0;                         // mean over ranks and micro-batches
  double lr = 0;
  double samples_per_s = 0;       // global
  int64_t tokens_per_sample = 0;  // token data: block_size (tokens/s is shown); 0 for images
  double mfu = 0;                 // fraction of the peak; shown when has_peak
  bool has_peak = false;
  ReducerStats comm;  // totals over the interval
  MemoryStats mem;
  std::array<double, StepTimer::kNumPhases> phases{};  // seconds, totals over the interval
  double loss_scale = 0;                               // > 0: the GradScaler is on
  double grad_norm = -1;                               // >= 0: clipping is on
  // What this rank holds of the training state (Note [ZeRO stage 1]): the parameters, the
  // gradients (DDP's buckets and the parameters' gradients at the step), the optimizer state.
  double param_mib = 0, grad_mib = 0, optim_mib = 0;
  double param_peak_mib = -1;  // >= 0 under zero_stage 3: the most parameter memory held this epoch
};

/// "epoch 1 step 10/468 | global step 478/936 | loss 0.7736 | lr 5.000e-02 | 1,046 samples/s | ...".
std::string format_step_line(const StepReport& r);

/// The same numbers, per step where they are totals, for --metrics_file and TensorBoard.
nlohmann::json step_record(const StepReport& r);

/// 12345.6 -> "12,346".
std::string with_commas(double v);

}  // namespace ddptrain
