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
// under auto the newest that verifies), marks the later ones abandoned at once (Note [A branch a
// run abandons]): were nothing done before the load, a restart of a first attempt that died in
// a slow start-up (opening the data, building the model) would resume auto and continue the
// branch the user abandoned. The claim only marks them: its identity may lack what the Trainer
// adds (the CLI's flags lack what the data decides, an image folder's class names; a program's
// options lack the optimizer and the parameters' shapes), so the Trainer moves them into
// .superseded/ once that whole identity has vouched that they are the run's and nothing else
// refuses the run (the resumed checkpoint loaded, the data fits it: fit(), before the first
// step), and a Trainer that refuses the choice removes the mark: another run's checkpoints are
// never moved. A run refused later keeps the mark, and its checkpoints and the folder's
// config.json are as the claim left them (an earlier hang's flight records, moved to
// .flight.previous/ as the ranks start their watchdogs, stay there: Note [An earlier start's
// flight records]).
// `ddptrain train` claims the folder first, before it opens the data and builds the model, and
// gives the claim to the Trainer; a Trainer given none claims the folder itself, so a library
// program is protected as the CLI is; a program whose start-up is slow may claim first. The
// lock is held while any holder of the claim keeps it: the Trainer until its fit() ends, the
// program as long as it likes.
#pragma once

#include <functional>
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
  bool taken = false;                          // given to a Trainer (one run's: a second is refused)
  /// Called (on each rank that set it) once the Trainer given the claim has accepted the run, before its
  /// first step: its identity, the resumed checkpoint's load and the data's checks passed, the
  /// abandoned branch set aside. What the program writes into the folder for the run (the CLI:
  /// the folder's config.json) waits for it, so a run refused at start changes nothing there.
  std::function<void()> on_run_accepted;
  /// Rank 0's <dir>/.torchrun_job, written for this torchrun job (Note [A torchrun job's
  /// restarts]): removed as the claim ends unless the run stopped on a signal (set by the
  /// Trainer), so that only a start after such a stop (torchrun's, when a node joins) continues.
  std::string job_marker;
  bool keep_job_marker = false;
  /// This start as the job's ranks agreed on it: a launcher's restart where any rank's was (this
  /// rank's count, at least 1: the nodes' agents count apart), else 0; and whether rank 0 found
  /// that the folder's last start was this torchrun job's (Note [A torchrun job's restarts]).
  int restart_count = 0;
  bool same_torchrun_job = false;

  CheckpointFolderClaim() = default;
  CheckpointFolderClaim(const CheckpointFolderClaim&) = delete;
  CheckpointFolderClaim& operator=(const CheckpointFolderClaim&) = delete;
  ~CheckpointFolderClaim();
};

/// Claims o.checkpoint.dir for a run of `o` (Note [A run claims its checkpoint folder]; o.run_identity
/// is the one its checkpoints are chosen by) and makes o.checkpoint say the claim's choice
/// (take_claims_choice). The errors of choose_resume_checkpoint (OptionError; identity names
/// after `name_prefix`: "--" for flags) and a UsageError on every rank where another run holds
/// the folder or a named checkpoint is damaged. The abandoned branch is marked, not moved: the
/// Trainer given the claim moves it once its whole identity has checked the choice (another
/// run's checkpoints are never moved). Collectives: every rank claims.
std::shared_ptr<CheckpointFolderClaim> claim_checkpoint_folder(TrainerOptions& o, const DistContext& ctx,
                                                               const std::string& name_prefix = "");

/// Note [A branch a run abandons]: this run's checkpoints in `dir` later than `resume` (all of
/// them for a fresh start: nothing) go to <dir>/.superseded/, and the claim's mark is removed.
/// A collective.
void set_aside_abandoned_branch(const std::string& dir, const std::optional<CheckpointEntry>& resume,
                                const DistContext& ctx);

/// co as a resume of the claim's choice: resume_from its checkpoint's directory ("" a fresh
/// start), resume_fallback cleared, resume_on_restart off (applied by the claim).
void take_claims_choice(CheckpointOptions& co, const CheckpointFolderClaim& claim);

}  // namespace ddptrain
