// Checkpoints: the full training state on disk, written by rank 0 only, atomically, and
// verified before anything is loaded. The state is a list of named parts (CheckpointPart):
// a module's state_dict, an optimizer, named tensors of the user's; each is one file
// `<name>.pt`. The trainer's are "model" and "optimizer" (training_parts).
// Layout: <checkpoint_dir>/<name>/{model.pt, optimizer.pt, <other parts>.pt, rng_states.bin,
// meta.json, config.json, manifest.json}.
//  - model.pt: the state_dict, loadable by Python `torch.load(p, weights_only=True)`
//    (see Note [weights_only pickles]);
//  - optimizer.pt: LibTorch's optimizer archive (momentum buffers); under ZeRO its parameter
//    groups only, and the state in optimizer.shard<r>.pt with optimizer.shards.json (Note
//    [Optimizer shard files]);
//  - rng_states.bin: every rank's CPU generator state, gathered to rank 0 by a collective, so
//    only rank 0 writes and the checkpoint is complete even without a shared file system;
//    cuda_rng_states.bin: the same of each rank's GPU generator (dropout on the GPU), for a run
//    on GPUs;
//  - meta.json: epoch, micro-batches done in it, optimizer step, world size, seed;
//  - manifest.json (written last): size and CRC-32 of every other file. A directory without
//    a valid manifest is not a checkpoint.
// Note [Atomic checkpoints]: files are written into `.tmp-<name>`, fsynced, the manifest
// last; then the directory is renamed to `<name>` and its parent fsynced. A crash at any
// moment leaves the previous checkpoints intact; leftovers (`.tmp-*`, `.old-*`) are removed
// at the next start. All ranks wait at a barrier afterwards (DESIGN.md invariant 3).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <nlohmann/json.hpp>

#include "checkpoint/durable_files.h"
#include "dist/dist_context.h"
#include "serialize/python_pickle.h"

namespace ddptrain {

struct CheckpointMeta {
  int epoch = 1;                // the epoch of the last trained micro-batch (1-based)
  int64_t batches_done = 0;     // micro-batches of that epoch already trained
  bool epoch_complete = false;  // resume at the start of epoch + 1
  int64_t global_step = 0;      // optimizer steps taken
  int world_size = 1;
  int64_t seed = 0;
  /// Small state of the trainer's, saved as top-level keys of meta.json (e.g. the loss
  /// scaler's "grad_scaler"); on reading, every key meta.json has besides the fields here.
  nlohmann::json extra = nlohmann::json::object();
  std::string precision;  // fp32 | bf16 | fp16: what the run trains in (train/precision.h)
  std::map<std::string, std::string>
      run;             // the flags that define the run (Note [Run identity]); empty if older
  int batch_size = 0;  // per rank, of batches_done (older checkpoints: config.json's, else 0: this run's)
};

/// A checkpoint directory and its meta.json.
struct CheckpointEntry {
  std::string dir;
  CheckpointMeta meta;
};

struct SaveOptions {
  int keep = 3;  // complete checkpoints kept in the directory; 0 = all
  /// Called by rank 0 at each stage of the save ("written:<file>" after each file,
  /// "files_written", "manifest_written", "old_moved_aside", "renamed"): the failure tests kill
  /// the process there.
  std::function<void(const char* stage)> on_stage;
  /// How long the other ranks wait for rank 0's writing (at the save's end, and after a file
  /// that a collective follows), at least (the context's timeout, --dist_timeout_s, when that
  /// is longer).
  std::chrono::seconds write_wait{1800};
};

/// The files of a checkpoint as a part with more files than `<name>.pt` sees them (Note
/// [Optimizer shard files]): `write` stores one (rank 0's calls; the other ranks' are ignored;
/// the file's name starts with `<name>.`), `read` gives one, or nullopt when it has none.
struct PartFiles {
  std::function<void(const std::string& file, const std::string& bytes)> write;
  std::function<std::optional<std::string>(const std::string& file)> read;
  std::string dir;  // the checkpoint's folder (loading), for messages
  /// Saving: every rank, in the same order, as a collective; returns once rank 0 has written
  /// its files so far. Called between a write of rank 0's and a collective, it makes the others
  /// wait for the writing on the store (SaveOptions::write_wait), not in the collective, whose
  /// --dist_timeout_s a long write would pass. Unset: nothing to wait for.
  std::function<void()> sync = nullptr;
};

/// One named part of a checkpoint: the file `<name>.pt`. `save` gives its bytes (rank 0
/// calls it); `load` restores from them (every rank calls it), naming `origin` in errors.
struct CheckpointPart {
  std::string name;                   // [a-z0-9_]+, unique in a checkpoint
  std::function<std::string()> save;  // rank 0 only
  std::function<void(const std::string& bytes, const std::string& origin)> load;  // every rank
  /// Optional, every rank, in part order: before and after rank 0 writes this part's files
  /// (collectives allowed: stage 3 gathers the parameters around the model's save).
  std::function<void()> before_save, after_save;
  /// Optional, every rank: after `save`, more files of the part (collectives allowed: every
  /// rank's shard reaches rank 0 in turn); after `load`, what it reads of them.
  std::function<void(const PartFiles&)> save_more, load_more;
};

/// A module's state_dict (parameters and buffers by name), loadable by Python's
/// torch.load(weights_only=True); loading checks every name and shape.
CheckpointPart module_part(std::string name, torch::nn::Module& module);
/// An optimizer's state (LibTorch's archive: per-parameter state and parameter groups).
CheckpointPart optimizer_part(std::string name, torch::optim::Optimizer& optimizer);
/// Named tensors of the user's (e.g. an EMA of the weights, a data cursor), by reference:
/// saved from the map, loaded into it (replacing its contents).
CheckpointPart tensors_part(std::string name, NamedTensors& tensors);
/// What the trainer saves: {"model", "optimizer"}.
std::vector<CheckpointPart> training_parts(torch::nn::Module& model, torch::optim::Optimizer& optimizer);

/// Writes `root/name` with every part (every rank calls it: it gathers RNG states and ends
/// with a barrier). Returns the checkpoint's path.
std::string save_checkpoint(const DistContext& ctx, const std::string& root, const std::string& name,
                            const std::vector<CheckpointPart>& parts, const CheckpointMeta& meta,
                            const std::string& config_json, SaveOptions opts = {});
/// The trainer's parts (training_parts).
std::string save_checkpoint(const DistContext& ctx, const std::string& root, const std::string& name,
                            torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                            const CheckpointMeta& meta, const std::string& config_json,
                            SaveOptions opts = {});

/// Checks the manifest, sizes and checksums (reads every file); returns the meta. Error naming
/// the file and the reason when the checkpoint is incomplete, truncated or corrupted.
CheckpointMeta verify_checkpoint(const std::string& dir);

/// What eval and export read, checked as verify_checkpoint checks it: the manifest, and
/// model.pt, meta.json and config.json by size and checksum. The other files may be gone (a
/// checkpoint whose optimizer.pt was deleted to keep its weights: docs/checkpoints.md).
CheckpointMeta verify_checkpoint_weights(const std::string& dir);

/// Checks the manifest and that every file it lists is there with its size (reads no file but
/// the manifest and meta.json); returns the meta. The checksums are checked where the files are
/// read: verify_checkpoint, load_checkpoint (Note [Checkpoints read once]). weights_only: the
/// files verify_checkpoint_weights reads.
CheckpointMeta check_checkpoint_complete(const std::string& dir, bool weights_only = false);

/// Whether dir looks like one checkpoint (it has a manifest; not verified), rather than a
/// folder of them.
bool is_checkpoint_dir(const std::string& dir);

/// The meta.json of a checkpoint (no checksums read).
CheckpointMeta read_checkpoint_meta(const std::string& dir);

/// Every checkpoint in root that is complete (check_checkpoint_complete), by optimizer step
/// (oldest first), warning about the invalid ones it skips; empty when root holds none or does
/// not exist. `incomplete`: also the skipped ones whose meta.json reads, so whose run they are
/// is known (Note [Run identity]; a user who deleted a run's optimizer.pt files to keep only its
/// weights has such a folder). weights_only: complete as eval and export read them
/// (check_checkpoint_complete's weights_only).
std::vector<CheckpointEntry> list_checkpoints(const std::string& root, const Logger& log,
                                              std::vector<CheckpointEntry>* incomplete = nullptr,
                                              bool weights_only = false);

/// The first of `newest_first` that verifies (verify_checkpoint; weights_only:
/// verify_checkpoint_weights), warning about each that does not; null when none does.
const CheckpointEntry* newest_that_verifies(const std::vector<const CheckpointEntry*>& newest_first,
                                            const Logger& log, bool weights_only = false);

/// The newest checkpoint in root that verifies (by optimizer step), past those a start of their
/// run abandoned (checkpoint/abandoned_mark.h); nullopt when there is none. Verifies from the
/// newest down, so older checkpoints are not read. weights_only: as eval and export read it (a
/// checkpoint whose optimizer.pt was deleted counts).
std::optional<std::string> find_latest_checkpoint(const std::string& root, const Logger& log,
                                                  bool weights_only = false);

/// Restores every part and this rank's RNG state from a checkpoint, each file read once and
/// checked against the manifest as it is read (Note [Checkpoints read once]). Error when it
/// does not verify, holds another model, or lacks one of the parts; another world size is no
/// error (logged; a new rank keeps its own RNG state: Note [Resume at another world size]).
CheckpointMeta load_checkpoint(const std::string& dir, const DistContext& ctx,
                               const std::vector<CheckpointPart>& parts);
/// The trainer's parts (training_parts).
CheckpointMeta load_checkpoint(const std::string& dir, const DistContext& ctx, torch::nn::Module& model,
                               torch::optim::Optimizer& optimizer);

/// Removes leftovers of interrupted saves (`.tmp-*`, `.old-*`); rank 0 calls it at start.
void clean_checkpoint_leftovers(const std::string& root, const Logger& log);

}  // namespace ddptrain
