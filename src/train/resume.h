// Which checkpoint a training run continues from, if any (Note [Run identity]).
#pragma once

#include <string>

#include "checkpoint/checkpoint.h"
#include "obs/logger.h"

namespace ddptrain {

struct TrainConfig;

/// The micro-batch of its epoch at which a run resumed from `meta` continues: the checkpoint's
/// position in samples (per rank) in batches of this run's --batch_size, which may differ
/// from the checkpoint's, so that every sample of the epoch is trained exactly once.
/// UsageError naming --batch_size when that position is not a whole number of accumulation
/// groups of the new batch size.
int64_t resume_micro_batch(const CheckpointMeta& meta, int batch_size, int grad_accum_steps);

/// The checkpoint directory this run resumes from, or "" for a fresh start, from --resume_from
/// (a directory, auto, or none) and the checkpoints in --checkpoint_dir. UsageError naming
/// the flags that differ when the chosen checkpoint, or the only ones auto finds, belong to
/// another run, or when a fresh run would write among another run's checkpoints. Reads
/// files only: every rank reaches the same answer.
std::string choose_resume_checkpoint(const TrainConfig& cfg, const Logger& log);

}  // namespace ddptrain
