// Note [A branch a run abandons]
// A run that starts fresh, or resumes from a checkpoint older than this run's newest, in a
// checkpoint.dir holding this run's checkpoints of later steps leaves those behind. Kept where
// they are, the rotation (which keeps the highest steps) would delete this run's own saves
// instead of them, and auto would resume them after a restart. So they go, in two steps:
// - the claim (Note [A run claims its checkpoint folder]) marks them at once: rank 0 writes
//   their names into <dir>/.abandoned.json, and `auto` skips a checkpoint the mark names (it
//   says so), so a restart of an attempt that died in its slow start-up (opening the data,
//   building the model) does not continue the branch its user abandoned; naming one with
//   resume_from still resumes it;
// - the Trainer moves them into <dir>/.superseded/ (kept; a folder whose name starts with a dot
//   is never a checkpoint to list, resume or rotate), says so and removes the mark, once its
//   whole identity (the optimizer, the parameters' shapes, what the data decides: an image
//   folder's class names) has vouched that they are this run's. A claim made by less (the CLI's
//   flags, a program's options) never moves another run's checkpoints: a Trainer that refuses
//   its claim's choice removes the mark, and nothing was moved.
// Each claim rewrites the mark (or removes it where it abandons nothing), and the Trainer
// removes it before its first save, so a mark only ever names checkpoints of a start that has
// not trained yet. A run refused after its claim for another reason (the data's size, a
// missing file) keeps its mark: a restart, or a later auto, skips the branch as the refused run
// would have.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "dist/dist_context.h"
#include "obs/logger.h"

namespace ddptrain {

/// The names (folder names) of the checkpoints in `dir` the folder's mark says a run abandoned;
/// empty where there is no mark. An Error naming the file where it cannot be read.
std::set<std::string> abandoned_checkpoints(const std::string& dir);

/// The claim's step: rank 0 marks the complete checkpoints in `dir` of steps after `after_step`
/// (-1: a fresh start's: all) as abandoned, or removes the mark where there are none, and says
/// so. A collective; an Error on every rank where rank 0 cannot write the mark.
void mark_abandoned_branch(const std::string& dir, int64_t after_step, const DistContext& ctx);

/// The Trainer's step: rank 0 moves the complete checkpoints in `dir` of steps after
/// `after_step` into <dir>/.superseded/, says so, and removes the mark. A collective; an Error
/// on every rank where rank 0 cannot move one.
void set_aside_later_checkpoints(const std::string& dir, int64_t after_step, const DistContext& ctx);

/// A Trainer that refused its claim's choice: the mark is removed (rank 0; not a collective),
/// since the checkpoints it names may be another run's. Never throws: a mark left is said.
void drop_abandoned_mark(const std::string& dir, const Logger& log);

}  // namespace ddptrain
