// Which checkpoint a training run continues from, if any (Note [Run identity]).
#pragma once

#include <string>

#include "obs/logger.h"

namespace ddptrain {

struct TrainConfig;

/// The checkpoint directory this run resumes from, or "" for a fresh start, from --resume_from
/// (a directory, auto, or none) and the checkpoints in --checkpoint_dir. UsageError naming
/// the flags that differ when the chosen checkpoint, or the only ones auto finds, belong to
/// another run, or when a fresh run would write among another run's checkpoints. Reads
/// files only: every rank reaches the same answer.
std::string choose_resume_checkpoint(const TrainConfig& cfg, const Logger& log);

}  // namespace ddptrain
