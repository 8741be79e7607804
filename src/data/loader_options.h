// LoaderOptions: how the loader makes batches; no LibTorch here (the CLI's flags bind to it).
#pragma once

namespace ddptrain {

/// How batches are made (TrainerOptions::data; `ddptrain train`'s --batch_size, --num_workers,
/// --prefetch_factor, --drop_last).
struct LoaderOptions {
  int batch_size = 64;      // samples per rank and micro-batch
  int num_workers = 4;      // loader threads; 0 = in the training thread
  int prefetch_factor = 2;  // batches each loader thread prepares ahead
  bool drop_last = true;    // each epoch's last partial batch per rank is dropped (false: trained)
  int worker_nice = 10;     // nice value of the worker threads (0 = same as the trainer)
  bool pin_memory =
      false;  // batches in page-locked memory (for non_blocking copies to CUDA); the Trainer sets it: on CUDA

  /// OptionError naming the field (Note [Options named by their field], util/error.h).
  void validate() const;
};

}  // namespace ddptrain
