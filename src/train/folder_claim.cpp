#include "train/folder_claim.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "checkpoint/durable_files.h"
#include "dist/every_rank.h"
#include "train/abandoned_branch.h"
#include "train/resume.h"
#include "util/error.h"

namespace ddptrain {
namespace {

int64_t step_resumed(const std::optional<CheckpointEntry>& resume) {
  return resume ? resume->meta.global_step : -1;  // -1: a fresh start's
}

// Note [A torchrun job's restarts]
// torchrun restarts a job's workers when its nodes change (a node joins a healthy job) without
// counting a restart ("membership changes do not count as retries", its elastic agent says):
// TORCHELASTIC_RESTART_COUNT stays where it was, 0 in a job that never failed, and such a start
// was a fresh one (unless --resume_from auto) that set the run's checkpoints aside and trained
// from step 0. torchrun stops the workers with SIGTERM first, and they stop together and save
// (Note [Agreed stop]). So rank 0, holding the folder's lock, writes the job's rendezvous id
// (TORCHELASTIC_RUN_ID; static rendezvous' "none" is none) into <dir>/.torchrun_job as a start
// claims the folder, and removes it as the run ends unless it stopped on a signal: a start of
// the same job after such a stop is a restart (it resumes the newest checkpoint, said in the
// log). A start without an id removes it. A job that finished, failed or was refused leaves
// none, so a later launch, even one reusing a --rdzv_id (an allocation's job id), starts as its
// flags say; a stop by a signal followed by a new launch of the same id continues, as a restart
// would (another --rdzv_id starts afresh), and so does one after a rank 0 killed outright (no
// destructor ran: the safer way to be wrong). A stop asked for keeps it however the run ends
// (Trainer::fit, the CLI's start-up). A counted restart needs none of this.
const char* const kJobFile = "/.torchrun_job";

// Rank 0's: whether the folder's last start was this torchrun job's.
bool same_torchrun_job(const std::string& dir, const std::string& job) {
  if (job.empty()) return false;
  std::ifstream in(dir + kJobFile);
  std::string last;
  return static_cast<bool>(std::getline(in, last)) && last == job;
}

struct Restart {
  int count = 0;         // at least 1 where any rank's count is
  std::string same_job;  // the torchrun job that started last in the folder, where it is this one
};

// The ranks agree whether this start is a restart (this rank's restart count, at least 1 where
// any rank's is, and rank 0's word on the job), then rank 0 takes the lock: a restart goes on
// past a lock a dead attempt's node still holds (a network filesystem), whichever rank's launcher
// counted it (under torchrun rank 0's node may restart uncounted: Note [An agent store outlives
// its attempts]).
Restart lock_and_agree_on_restart(CheckpointFolderClaim& claim, const DistContext& ctx) {
  const int own = ctx.restart_count();
  // Read before the all-reduce that carries it (a read: the lock guards the writes).
  const bool same_job = ctx.is_main() && !claim.dir.empty() && same_torchrun_job(claim.dir, ctx.job_id());
  const std::vector<int64_t> restarted = on_every_rank(
      ctx, "the start: the ranks' restart counts", [] {},
      [](int64_t n) { return ranks_could_not(n, "say their restart counts"); },
      {own > 0 ? 1 : 0, same_job ? 1 : 0});
  const Restart restart{restarted[0] > 0 ? std::max(own, 1) : 0,
                        restarted[1] > 0 ? ctx.job_id() : std::string()};
  on_every_rank(
      ctx, "the start: rank 0's lock of the checkpoint folder",
      [&] {
        if (ctx.is_main() && !claim.dir.empty()) {
          claim.lock = std::make_unique<CheckpointFolderLock>(claim.dir, ctx.log(),
                                                              restart.count > 0 || !restart.same_job.empty());
          claim.job_marker = claim.dir + kJobFile;
          std::error_code ec;  // none to remove, or it stays: it names another job
          if (ctx.job_id().empty()) {
            std::filesystem::remove(claim.job_marker, ec);
          } else {
            try {
              write_file_atomic(claim.job_marker, ctx.job_id() + "\n");
            } catch (const std::exception& e) {  // not the lock's failure: said, not thrown
              ctx.log().warn(str("cannot write ", claim.job_marker, " (", e.what(),
                                 "): if torchrun restarts this job's workers uncounted (a node joins), they "
                                 "start as their flags say"));
            }
          }
        }
      },
      [&](int64_t) {
        return str("checkpoint folder '", claim.dir,
                   "' is in use by another run, or cannot be locked (rank 0's log says which): give this run "
                   "another checkpoint folder");
      });
  return restart;
}

}  // namespace

CheckpointFolderClaim::~CheckpointFolderClaim() {
  std::error_code ec;  // before the lock goes (a member): a destructor throws nothing
  if (!job_marker.empty() && !keep_job_marker) std::filesystem::remove(job_marker, ec);
}

std::shared_ptr<CheckpointFolderClaim> claim_checkpoint_folder(TrainerOptions& o, const DistContext& ctx,
                                                               const std::string& name_prefix) {
  const Logger& log = ctx.log();
  CheckpointOptions& co = o.checkpoint;
  auto claim = std::make_shared<CheckpointFolderClaim>();
  claim->dir = co.dir;
  const Restart restart = lock_and_agree_on_restart(*claim, ctx);
  claim->restart_count = restart.count;
  claim->same_torchrun_job = !restart.same_job.empty();
  if (co.resume_on_restart)
    continue_newest_on_restart(co, restart.count, restart.same_job, log);  // none without a dir
  if (!co.dir.empty()) {  // what an interrupted save left is put back before any listing
    if (ctx.is_main()) clean_checkpoint_leftovers(co.dir, log);
    ctx.barrier("the checkpoint folder (after cleaning checkpoint leftovers)");
  }
  const bool chose_auto = co.resume_from == "auto";
  on_every_rank(  // each rank reads its own listing: one that is refused stops the others with it
      ctx, "the ranks' choice of the checkpoint to resume",
      [&] { claim->resume = choose_resume_checkpoint(o, ctx.world_size(), log, name_prefix); },
      [&](int64_t n) { return ranks_could_not(n, "choose the checkpoint to resume"); });
  // Under auto each rank chose from its own listing; a named one may be another file on a node
  // (Note [One checkpoint for every rank]).
  check_ranks_chose_the_same(ctx, claim->resume ? claim->resume->dir : "",
                             chose_auto ? co.dir : co.resume_from,
                             name_prefix.empty() ? "checkpoint.resume_from" : "--resume_from");
  take_claims_choice(co, *claim);
  mark_abandoned_branch(co.dir, step_resumed(claim->resume), ctx);  // moved by the Trainer
  return claim;
}

void set_aside_abandoned_branch(const std::string& dir, const std::optional<CheckpointEntry>& resume,
                                const DistContext& ctx) {
  // Later ones are left by a named checkpoint or a fresh start; under auto, the later ones that
  // did not verify (damaged: kept, but out of the rotation's and a restart's way).
  if (!dir.empty()) set_aside_later_checkpoints(dir, step_resumed(resume), ctx);
}

void take_claims_choice(CheckpointOptions& co, const CheckpointFolderClaim& claim) {
  co.resume_from = claim.resume ? claim.resume->dir : "";
  co.resume_fallback.clear();
  co.resume_on_restart = false;
}

}  // namespace ddptrain
