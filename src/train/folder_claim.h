// Note [A run claims its checkpoint folder]
// Before a run reads or writes anything in its checkpoint folder, its ranks claim it in one
// place, in this order. Rank 0 takes the folder's lock (Note [One run per checkpoint folder]),
// and in the same all-reduce the ranks agree whether this start is a restart (each torchrun
// agent counts its own restarts, and a node that joins late counts 0: ranks that disagreed took
// different paths below, and their collectives parted); a lock held elsewhere stops every rank
// (Note [A failure on some ranks stops every rank]). A restart continues the run's newest
// checkpoint (CheckpointOptions::resume_on_restart). Rank 0 puts back what an interrupted save
// left. The checkpoint to resume is chosen and verified whole (Note [Run identity], Note
// [Checkpoints read once]: a damaged one named by resume_from is exit 2 and changes nothing on
// disk). A fresh start, or a resume of a checkpoint older than the run's newest (one named, or
// under auto the newest that verifies), sets the later ones aside at once (Note [A branch a run
// abandons]): were it done after the load, a
// restart of a first attempt that died in a slow start-up (opening the data, building the
// model) would resume auto and continue the branch the user abandoned. `ddptrain train` claims
// the folder first, before it opens the data and builds the model, and gives the claim to the
// Trainer; a Trainer given none claims the folder itself, so a library program is protected as
// the CLI is. A program whose start-up is slow may claim first: it holds the lock from then,
// but its claim sets nothing aside (its identity lacks what the Trainer adds: the optimizer,
// the parameters' shapes), and its Trainer sets the branch aside once that whole identity has
// vouched that the checkpoints are the run's, so a restart within the program's start-up can
// still continue the branch. The CLI's claim sets aside by the flags, which hold the rest of a
// CLI run's identity except what the data decides (an image folder's class names, a
// webdataset's label count): a fresh start or an explicit resume with the same flags over
// other data can set another run's later checkpoints aside (kept in .superseded/, said in the
// log) before the Trainer would refuse it. The lock is held while any holder of the claim
// keeps it: the Trainer until its fit() ends, the program as long as it likes. A resume
// refused after the claim (the data's size, a part that does not load) has set the branch
// aside already: kept in .superseded/, said in the log.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "checkpoint/folder_lock.h"
#include "dist/dist_context.h"
#include "train/trainer_options.h"

namespace ddptrain {

struct CheckpointFolderClaim {
  std::string dir;  // the checkpoint.dir claimed ("": none; the run saves nothing)
  /// The checkpoint the run continues, verified whole, with its meta.json; nothing: a fresh start.
  std::optional<CheckpointEntry> resume;
  std::unique_ptr<CheckpointFolderLock> lock;  // rank 0's (none elsewhere, without a dir, or unlockable)
  bool branch_set_aside = false;               // by the claim (whole_identity), else by the Trainer
  bool taken = false;                          // given to a Trainer (one run's: a second is refused)
};

/// Claims o.checkpoint.dir for a run of `o` (Note [A run claims its checkpoint folder]; o.run_identity
/// is the one its checkpoints are chosen by) and makes o.checkpoint say the claim's choice
/// (take_claims_choice). The errors of choose_resume_checkpoint (OptionError; identity names
/// after `name_prefix`: "--" for flags) and a UsageError on every rank where another run holds
/// the folder or a named checkpoint is damaged. `whole_identity`: o.run_identity is the run's
/// whole identity (the CLI's flags; the Trainer's, with the entries it adds), so the abandoned
/// branch is set aside here; a program's claim, made before its Trainer adds the optimizer's
/// and the parameters' entries, leaves that to the Trainer, which first checks the choice by
/// them (another run's checkpoints are never moved). Collectives: every rank claims.
std::shared_ptr<CheckpointFolderClaim> claim_checkpoint_folder(TrainerOptions& o, const DistContext& ctx,
                                                               const std::string& name_prefix = "",
                                                               bool whole_identity = false);

/// Note [A branch a run abandons]: this run's checkpoints in `dir` later than `resume` (all of
/// them for a fresh start: nothing) go to <dir>/.superseded/. A collective.
void set_aside_abandoned_branch(const std::string& dir, const std::optional<CheckpointEntry>& resume,
                                const DistContext& ctx);

/// co as a resume of the claim's choice: resume_from its checkpoint's directory ("" a fresh
/// start), resume_fallback cleared, resume_on_restart off (applied by the claim).
void take_claims_choice(CheckpointOptions& co, const CheckpointFolderClaim& claim);

}  // namespace ddptrain
