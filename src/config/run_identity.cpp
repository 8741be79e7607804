#include "config/run_identity.h"

#include <algorithm>

#include "config/train_config.h"

namespace ddptrain {

const std::vector<std::string>& flags_that_may_change_on_resume() {
  static const std::vector<std::string> kFlags = [] {
    std::vector<std::string> f = {
        // where things are, and how long to train
        "config", "data_dir", "data_path", "checkpoint_dir", "resume_from", "init_from", "epochs", "max_steps",
        // saving, evaluation and logging
        "save_every", "save_every_steps", "keep_checkpoints", "checkpoint_on_signal", "eval_every", "metrics_file",
        "tensorboard_dir", "trace_samples_dir", "keep_global_batch", "log_interval", "enable_profiling", "peak_tflops",
        // the machine and speed, not what is trained
        "num_workers", "prefetch_factor", "threads", "cpu_heap_keep_mb", "backend", "dist_timeout_s", "flight_recorder",
        "bucket_cap_mb", "first_bucket_mb", "gradient_as_bucket_view", "find_unused_parameters", "ddp_overlap",
        "accum_no_sync", "memory_format", "activation_checkpointing", "use_amp", "amp_dtype", "zero_stage",
        // the resume position is in samples (train/resume.h)
        "batch_size"};
    std::sort(f.begin(), f.end());
    return f;
  }();
  return kFlags;
}

RunIdentity run_identity(const TrainConfig& cfg) {
  TrainConfig copy = cfg;
  const auto& free = flags_that_may_change_on_resume();
  RunIdentity id;
  for (const Flag& f : train_flags(copy))
    if (!std::binary_search(free.begin(), free.end(), f.name)) id[f.name] = f.get();
  return id;
}

std::vector<std::string> identity_differences(const RunIdentity& mine, const RunIdentity& theirs) {
  std::vector<std::string> out;
  for (const auto& [flag, value] : mine) {
    auto it = theirs.find(flag);
    if (it != theirs.end() && it->second != value)
      out.push_back("--" + flag + " " + value + " (the checkpoint's: " + it->second + ")");
  }
  return out;
}

}  // namespace ddptrain
