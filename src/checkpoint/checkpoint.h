// Checkpoints: the full training state on disk, written by rank 0 only, atomically, and
// verified before anything is loaded.
// Layout: <checkpoint_dir>/<name>/{model.pt, optimizer.pt, rng_states.bin, meta.json,
// config.json, manifest.json}.
//  - model.pt: the state_dict, loadable by Python `torch.load(p, weights_only=True)`
//    (see Note [weights_only pickles]);
//  - optimizer.pt: LibTorch's optimizer archive (momentum buffers);
//  - rng_states.bin: every rank's CPU generator state, gathered to rank 0 by a collective, so
//    only rank 0 writes and the checkpoint is complete even without a shared file system;
//  - meta.json: epoch, micro-batches done in it, optimizer step, world size, seed;
//  - manifest.json (written last): size and CRC-32 of every other file. A directory without
//    a valid manifest is not a checkpoint.
// Note [Atomic checkpoints]: files are written into `.tmp-<name>`, fsynced, the manifest
// last; then the directory is renamed to `<name>` and its parent fsynced. A crash at any
// moment leaves the previous checkpoints intact; leftovers (`.tmp-*`, `.old-*`) are removed
// at the next start. All ranks wait at a barrier afterwards (DESIGN.md invariant 3).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "dist/dist_context.h"
#include "train/grad_scaler.h"

namespace ddptrain {

struct CheckpointMeta {
  int epoch = 1;               // the epoch of the last trained micro-batch (1-based)
  int64_t batches_done = 0;    // micro-batches of that epoch already trained
  bool epoch_complete = false; // resume at the start of epoch + 1
  int64_t global_step = 0;     // optimizer steps taken
  int world_size = 1;
  int64_t seed = 0;
  std::optional<GradScalerState> scaler;  // when loss scaling is on
  std::string precision;       // fp32 | bf16 | fp16: what the run trains in (train/precision.h)
  std::map<std::string, std::string> run;  // the flags that define the run (Note [Run identity]); empty if older
  int batch_size = 0;          // per rank, of batches_done (0 in older checkpoints: this run's)
};

/// A checkpoint directory and its meta.json.
struct CheckpointEntry {
  std::string dir;
  CheckpointMeta meta;
};

struct SaveOptions {
  int keep = 3;  // complete checkpoints kept in the directory; 0 = all
  /// Called by rank 0 at each stage of the save ("files_written", "manifest_written",
  /// "old_moved_aside", "renamed"): the failure tests kill the process there.
  std::function<void(const char* stage)> on_stage;
};

/// Writes `root/name` (every rank calls it: it gathers RNG states and ends with a barrier).
/// Returns the checkpoint's path.
std::string save_checkpoint(const DistContext& ctx, const std::string& root, const std::string& name,
                            const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            const CheckpointMeta& meta, const std::string& config_json, SaveOptions opts = {});

/// Checks the manifest, sizes and checksums; returns the meta. Error naming the file and the
/// reason when the checkpoint is incomplete, truncated or corrupted.
CheckpointMeta verify_checkpoint(const std::string& dir);

/// The meta.json of a checkpoint already verified (no checksums read).
CheckpointMeta read_checkpoint_meta(const std::string& dir);

/// verify_checkpoint, and the checkpoint was written by a job of this world size.
CheckpointMeta verify_resumable(const std::string& dir, const DistContext& ctx);

/// Every checkpoint in root that verifies, by optimizer step (oldest first), warning about
/// the invalid ones it skips; empty when root holds none or does not exist.
std::vector<CheckpointEntry> list_valid_checkpoints(const std::string& root, const Logger& log);

/// The newest checkpoint in root that verifies (by optimizer step); nullopt when there is none.
std::optional<std::string> find_latest_checkpoint(const std::string& root, const Logger& log);

/// Restores model, optimizer and this rank's RNG state from a verified checkpoint.
/// Error when it was written by another world size or model.
CheckpointMeta load_checkpoint(const std::string& dir, const DistContext& ctx, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer);

/// Removes leftovers of interrupted saves (`.tmp-*`, `.old-*`); rank 0 calls it at start.
void clean_checkpoint_leftovers(const std::string& root, const Logger& log);

/// Writes bytes to path via a temporary file, fsync and rename.
void write_file_atomic(const std::string& path, const std::string& bytes);

/// Reads a whole file; Error naming it when missing.
std::string read_file(const std::string& path);

}  // namespace ddptrain
