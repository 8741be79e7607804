// Checkpoints: the training state on disk, written by rank 0 only, atomically.
// Layout: <checkpoint_dir>/<name>/{model.pt, optimizer.pt, meta.json, config.json}.
//  - model.pt: the model's state_dict, loadable by Python `torch.load(p, weights_only=True)`
//    (see Note [weights_only pickles]);
//  - optimizer.pt: LibTorch's optimizer archive (momentum buffers), for resume;
//  - meta.json: epoch, global step, world size; config.json: the resolved config.
// Note [Atomic checkpoints]: files are written into `.tmp-<name>`, fsynced, then the
// directory is renamed to `<name>` and its parent fsynced. A crash at any moment leaves
// either the old state or the complete new checkpoint, never a half-written one under a
// final name. All ranks wait at a barrier afterwards (DESIGN.md invariant 3).
#pragma once

#include <cstdint>
#include <string>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include "dist/dist_context.h"

namespace ddptrain {

struct CheckpointMeta {
  int epoch = 0;             // completed epochs
  int64_t global_step = 0;   // optimizer steps taken
  int world_size = 1;
};

/// Writes `root/name` on rank 0 (every rank calls it: it ends with a barrier).
/// Returns the checkpoint's path.
std::string save_checkpoint(const DistContext& ctx, const std::string& root, const std::string& name,
                            const torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            const CheckpointMeta& meta, const std::string& config_json);

/// Restores model and optimizer from a checkpoint directory; returns its meta.
CheckpointMeta load_checkpoint(const std::string& dir, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer);

/// Writes bytes to path via a temporary file, fsync and rename.
void write_file_atomic(const std::string& path, const std::string& bytes);

/// Reads a whole file; Error naming it when missing.
std::string read_file(const std::string& path);

}  // namespace ddptrain
