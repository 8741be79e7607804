// TrainConfig: everything `ddptrain train` runs, as the library's own options: the data and
// the model it builds, the optimizer, the Trainer's options (train/trainer_options.h), and
// what the program owns around them (the process group, threads, the heap, the initial
// weights). The flag table binds each flag straight to one of these fields; every default is
// the field's. Invariant: after resolve_train_config() returns, every part has validated.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "config/flag_table.h"
#include "data/data_options.h"
#include "models/model_options.h"
#include "train/loss_kind.h"
#include "train/optimizer_options.h"
#include "train/trainer_options.h"

namespace ddptrain {

/// The process group and what the program builds for it.
struct DistOptions {
  std::string backend = "auto";  // auto | gloo | nccl
  int dist_timeout_s = 600;      // every collective (and the rendezvous where the next is 0)
  int rendezvous_timeout_s = 0;  // the ranks' joining (Note [Rendezvous deadline]); 0: dist_timeout_s
  int flight_recorder = 64;  // collectives each rank remembers for a hang's verdict (Note [Flight recorder])
  bool sync_bn = false;      // BatchNorm statistics over the global batch
};

/// What the program owns around the Trainer.
struct ProgramOptions {
  std::string config;                       // the TOML file the run was read from, if any
  LossKind loss = LossKind::kCrossEntropy;  // mse: float targets (--dataset tensors)
  FusedLoss fused_loss = FusedLoss::kAuto;  // Note [Fused cross-entropy]
  int threads = 0;                          // intra-op threads per rank; 0 = cores / local_world_size
  /// Freed CPU heap kept for the next step (Note [CPU heap kept across steps]); 0 = glibc's
  /// policy; -1 = 1024 at zero_stage 0, the lean heap under ZeRO (memory is the point there).
  int cpu_heap_keep_mb = -1;
  bool deterministic = false;  // deterministic algorithms only (Note [Deterministic GPU runs])
  bool tf32 = false;           // fp32 matmuls on CUDA in TensorFloat-32 (PyTorch's allow_tf32)
};

struct TrainConfig {
  DataOptions data;
  ModelOptions model;
  OptimizerOptions optimizer;
  TrainerOptions trainer;
  DistOptions dist;
  ProgramOptions program;
};

/// The one flag table of `ddptrain train`, bound to the fields of c.
std::vector<Flag> train_flags(TrainConfig& c);

/// Defaults, then `base` (eval, export: the checkpoint's own flags, less what only training
/// reads: Note [A checkpoint's own flags]), then the --config TOML file of `args` (if given),
/// then `args`. Validated: a bad field of the Trainer's options is named by its flag (Note
/// [Options named by their field]).
TrainConfig resolve_train_config(const std::vector<std::string>& args,
                                 const std::vector<std::string>& base = {});

/// The names of the flags `args` gives and (with_config) of the keys of the --config file it
/// names (a value equal to the default included).
std::set<std::string> flags_given(const std::vector<std::string>& args, bool with_config = true);

/// lr_schedule as the Trainer resolves it for the optimizer this config builds.
LrSchedule effective_lr_schedule(const TrainConfig& c);

/// The usage line of `ddptrain train`.
extern const char* const kTrainUsage;

}  // namespace ddptrain
