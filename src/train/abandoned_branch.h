// Note [A branch a run abandons]
// A run that starts fresh, or resumes from a checkpoint older than this run's newest, in a
// checkpoint.dir holding this run's checkpoints of later steps leaves those behind. Kept where
// they are, the rotation (which keeps the highest steps) would delete this run's own saves
// instead of them, and auto would resume them after a restart. So they go, in two steps:
// - the claim (Note [A run claims its checkpoint folder]) marks them at once: rank 0 writes
//   their names into <dir>/.abandoned.json (checkpoint/abandoned_mark.h), and `auto` skips a
//   checkpoint the mark names, as eval and export do where given the folder (each says so),
//   so a restart of an attempt that died in its slow start-up (opening the data, building the
//   model) does not continue the branch its user abandoned; naming one still uses it;
// - the Trainer moves them into <dir>/.superseded/ (kept; a folder whose name starts with a dot
//   is never a checkpoint to list, resume or rotate), says so and removes the mark, once its
//   whole identity (the optimizer, the parameters' shapes, what the data decides: an image
//   folder's class names) has vouched that they are this run's and nothing else refuses the
//   run (fit() has loaded the resumed checkpoint and checked the data). A claim made by less (the CLI's
//   flags, a program's options) never moves another run's checkpoints: a Trainer whose check
//   finds a marked checkpoint another run's removes the mark, and nothing was moved.
// Each claim rewrites the mark (or removes it where it abandons nothing), and the Trainer
// removes it before its first save, so a mark only ever names checkpoints of a start that has
// not trained yet. A run refused after its claim for another reason (the checkpoint it named
// is another run's, the data's size, a missing file) keeps its mark: a restart (torchrun
// restarts whatever the exit code), or a later auto, skips the branch as the refused run would
// have; deleting the mark undoes that.
#pragma once

#include <cstdint>
#include <string>

#include "dist/dist_context.h"
#include "obs/logger.h"
#include "train/run_identity.h"

namespace ddptrain {

/// The claim's step: rank 0 marks the complete checkpoints in `dir` of steps after `after_step`
/// (-1: a fresh start's: all) as abandoned, or removes the mark where there are none, and says
/// so. A collective; an Error on every rank where rank 0 cannot write the mark.
void mark_abandoned_branch(const std::string& dir, int64_t after_step, const DistContext& ctx);

/// The Trainer's step: rank 0 moves the complete checkpoints in `dir` of steps after
/// `after_step` into <dir>/.superseded/, says so, and removes the mark. A collective; an Error
/// on every rank where rank 0 cannot move one.
void set_aside_later_checkpoints(const std::string& dir, int64_t after_step, const DistContext& ctx);

/// A Trainer that refused its claim's choice (rank 0; not a collective): the mark is removed
/// where a checkpoint it names is another run's by `identity` (the Trainer's whole one), and
/// kept where they are all this run's (the refusal was of the chosen checkpoint, or of another
/// checkpoint in the folder). Never throws: a mark left is said.
void drop_mark_of_another_run(const std::string& dir, const RunIdentity& identity, const Logger& log);

}  // namespace ddptrain
