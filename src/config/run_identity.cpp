#include "config/run_identity.h"

#include <algorithm>
#include <fstream>

#include "config/train_config.h"
#include "data/datasets.h"
#include "util/error.h"
#include "util/fnv.h"

namespace ddptrain {

namespace {

// FNV-1a 64 of a file's bytes as 16 hex digits; "" when it cannot be read (the model build
// then names the path).
std::string content_hash(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  uint64_t h = kFnvOffset;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) h = fnv1a(buf, static_cast<size_t>(in.gcount()), h);
  return hex16(h);
}

}  // namespace

const std::vector<std::string>& flags_that_may_change_on_resume() {
  static const std::vector<std::string> kFlags = [] {
    std::vector<std::string> f = {
        // where things are, and how long to train
        "config", "data_dir", "data_path", "val_path", "checkpoint_dir", "resume_from", "resume_fallback",
        "init_from", "init_from_hf", "epochs", "max_steps",
        // a scripted module's file: the run records its content instead (kModuleContent)
        "model_path",
        // saving, evaluation and logging
        "save_every", "save_every_steps", "keep_checkpoints", "checkpoint_on_signal", "eval_every",
        "metrics_file", "tensorboard_dir", "trace_samples_dir", "keep_global_batch", "log_interval",
        "enable_profiling", "profile_first_step", "profile_steps", "peak_tflops",
        // the machine and speed, not what is trained
        "num_workers", "prefetch_factor", "threads", "deterministic", "tf32", "cpu_heap_keep_mb", "backend",
        "dist_timeout_s", "rendezvous_timeout_s", "flight_recorder", "bucket_cap_mb", "first_bucket_mb",
        "gradient_as_bucket_view", "find_unused_parameters", "ddp_overlap", "accum_no_sync", "memory_format",
        "activation_checkpointing", "use_amp", "amp_dtype", "zero_stage", "fused_optimizer", "fused_loss",
        "fused_norm", "fused_linear",
        // fp16's loss scaler, which comes and goes with the precision (bf16 and fp32 refuse its
        // flags); a checkpoint's scale replaces the initial one
        "scaler_init_scale", "scaler_growth_interval",
        // an image that does not decode: a run stopped by one resumes skipping it
        "bad_images",
        // the resume position is in samples (train/resume.h)
        "batch_size",
        // llama: an export's config.json only (--block_size is what the model attends over); a
        // Hugging Face import before 2026-12-05 capped max_positions at a window
        "max_positions", "sliding_window", "max_window_layers"};
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
  if (!cfg.model.model_path.empty()) id[kModuleContent] = content_hash(cfg.model.model_path);
  return id;
}

void add_data_identity(RunIdentity& id, const Dataset& train) {
  const uint64_t names = train.label_names_hash();
  if (names == 0) return;
  id[kImageClasses] = str(train.shape().num_classes, " classes, names ", hex16(names));
}

}  // namespace ddptrain
