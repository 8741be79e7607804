#include "train/resume.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "checkpoint/abandoned_mark.h"
#include "checkpoint/checkpoint.h"
#include "dist/every_rank.h"
#include "util/error.h"
#include "util/fnv.h"
#include "util/strings.h"

namespace ddptrain {
namespace {

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : "; ") + s;
  return out;
}

// OptionError: the checkpoint `c` belongs to another run; `what` says where it was found. The
// fields: {0} checkpoint.resume_from, {1} checkpoint.dir.
[[noreturn]] void another_run(const TrainerOptions& o, const std::string& what, const CheckpointEntry& c,
                              const std::vector<std::string>& diff, const std::string& fix) {
  throw OptionError(
      {{&o.checkpoint.resume_from, "checkpoint.resume_from"}, {&o.checkpoint.dir, "checkpoint.dir"}},
      str(what, " '", OptionError::literal(c.dir), "' (step ", c.meta.global_step,
          ") belongs to another run; what differs: ", OptionError::literal(joined(diff)), ". ", fix,
          " (Note [Run identity]; what a resume may change: docs/checkpoints.md)"))
      .within(&o);
}

// OptionError when the checkpoint `c`, named by checkpoint.resume_from, records another run's
// identity.
void refuse_another_runs_checkpoint(const TrainerOptions& o, const CheckpointEntry& c,
                                    const std::string& name_prefix) {
  const auto diff = identity_differences(o.run_identity, c.meta.run, name_prefix);
  if (!diff.empty())
    another_run(o, "{0}: the checkpoint", c, diff,
                "Resume it with its run's options, or start this run without {0} in another {1}");
}

constexpr const char* kAnotherRunsFolderFix =
    "Continue that run with its options (and {0:auto}), or pass another {1} for this one";

// What checkpoint.dir holds: its complete checkpoints (oldest step first) and the incomplete
// ones whose run is known (list_checkpoints), from one listing.
struct Listing {
  std::vector<CheckpointEntry> complete, incomplete;
};

Listing listing_of(const std::string& dir, const Logger& log) {
  Listing l;
  l.complete = list_checkpoints(dir, log, &l.incomplete);
  return l;
}

// OptionError when another run's checkpoint is among `entries` (`which`: "the newest", ...).
void refuse_another_runs_among(const TrainerOptions& o, const std::vector<CheckpointEntry>& entries,
                               const std::string& name_prefix, const std::string& what, const char* which) {
  for (auto c = entries.rbegin(); c != entries.rend(); ++c) {
    const auto diff = identity_differences(o.run_identity, c->meta.run, name_prefix);
    if (!diff.empty())
      another_run(o, str(what, ": {1} holds another run's checkpoints; ", which), *c, diff,
                  kAnotherRunsFolderFix);
  }
}

// OptionError when checkpoint.dir holds another run's checkpoints: this run's saves would
// overwrite theirs of the same name and rotate the others away, whether it starts fresh or
// resumes (`what`: which). Its incomplete ones too (a save of the same name replaced one whose
// optimizer.pt a user deleted to keep the weights).
void refuse_another_runs_folder(const TrainerOptions& o, const Listing& listed,
                                const std::string& name_prefix, const char* what) {
  refuse_another_runs_among(o, listed.incomplete, name_prefix, what, "an incomplete one");
  refuse_another_runs_among(o, listed.complete, name_prefix, what, "the newest");
}

// The per-rank batch of the checkpoint's position (older checkpoints did not record it: this run's).
int64_t checkpoint_batch(const CheckpointMeta& meta, int64_t batch_size) {
  return meta.batch_size > 0 ? meta.batch_size : batch_size;
}

void check_fresh_start(const TrainerOptions& o, const Listing& listed, const std::string& name_prefix) {
  refuse_another_runs_folder(o, listed, name_prefix, "a new run");
}

}  // namespace

int64_t resume_micro_batch(const CheckpointMeta& meta, const TrainerOptions& o) {
  if (meta.epoch_complete) return 0;
  const int batch_size = o.data.batch_size, grad_accum_steps = o.loop.grad_accum_steps;
  const int64_t old = checkpoint_batch(meta, batch_size);
  const int64_t samples = meta.batches_done * old;  // per rank, into the epoch
  const int64_t group = static_cast<int64_t>(batch_size) * grad_accum_steps;
  if (samples % group != 0)
    throw OptionError(
        {{&o.data.batch_size, "data.batch_size"}},
        str("{0}=", batch_size, ": the checkpoint stopped ", samples, " samples per rank into epoch ",
            meta.epoch, " (", meta.batches_done, " batches of ", old, "), not a whole number of ",
            grad_accum_steps > 1 ? "accumulation groups of " : "batches of ", group,
            " samples, so training on would repeat or skip samples; resume with a {0} that divides ", samples,
            " (e.g. ", old, "), or from a checkpoint at an epoch's end"))
        .within(&o);
  return samples / batch_size;
}

EpochPlan epoch_plan_of(const CheckpointMeta& meta, int batch_size) {
  if (meta.extra.contains("epoch_plan")) {
    const auto& p = meta.extra["epoch_plan"];
    return {p.at("world").get<int>(),
            p.at("batch").get<int64_t>(),
            p.at("end").get<int64_t>(),
            p.at("done").get<int64_t>(),
            p.value("samples", int64_t{-1}),
            p.contains("files") ? std::stoull(p["files"].get<std::string>(), nullptr, 16) : uint64_t{0}};
  }
  const int64_t b = checkpoint_batch(meta, batch_size);
  return {meta.world_size, b, -1, meta.batches_done * b * meta.world_size, -1};
}

ResumePoint resume_point(const CheckpointMeta& meta, int world, const TrainerOptions& o) {
  if (meta.epoch_complete) return {};
  const EpochPlan plan = epoch_plan_of(meta, o.data.batch_size);
  // The epoch's own order at its own size, trained from its start by the checkpoint's run: its
  // batches_done are the epoch's. A run that finished the rest of an epoch (even back at the
  // epoch's world size) counts them from where the rest began: only the plan's prefix says.
  const int64_t old = checkpoint_batch(meta, o.data.batch_size);
  if (plan.world == world && meta.world_size == world && plan.done == meta.batches_done * old * world)
    return {resume_micro_batch(meta, o), std::nullopt};
  return {0, plan};
}

void check_training_set_size(const CheckpointMeta& meta, int64_t samples, uint64_t files,
                             const std::string& from, const DistContext& ctx) {
  const EpochPlan plan = epoch_plan_of(meta, 1);
  if (plan.samples < 0) return;  // not recorded
  const bool other_size = plan.samples != samples;
  if (!other_size && (plan.files == 0 || files == 0 || plan.files == files)) return;
  const std::string differs =
      other_size ? str(", and this run's training set has ", samples)
                 : str(" read from other files than this run's (", samples,
                       " too, but other names or sizes: shards renamed, reordered or replaced)");
  if (!meta.epoch_complete)
    throw UsageError(str("the checkpoint '", from, "' stopped mid-epoch ", meta.epoch,
                         " of a training set of ", plan.samples, " samples", differs,
                         ": the epoch's order names samples by index, so continuing it would repeat some and "
                         "skip others. Resume with the checkpoint's data, or from a checkpoint at an epoch's "
                         "end (epoch_",
                         fmt("%04d", meta.epoch - 1), " or earlier)"));
  if (ctx.is_main())
    ctx.log().warn(str("the checkpoint's run (", from, ") trained on ", plan.samples, " samples", differs,
                       ": epoch ", meta.epoch + 1, " on draws its order over the new set"));
}

namespace {

// The checkpoint run's global batch (older checkpoints: with this run's accumulation).
int64_t global_batch_of(const CheckpointMeta& meta, int batch_size, int grad_accum_steps) {
  if (meta.extra.contains("global_batch")) return meta.extra["global_batch"].get<int64_t>();
  return global_batch(checkpoint_batch(meta, batch_size), grad_accum_steps, meta.world_size);
}

}  // namespace

int64_t checkpoint_global_batch(const CheckpointMeta& meta, const TrainerOptions& o) {
  return global_batch_of(meta, o.data.batch_size, o.loop.grad_accum_steps);
}

int kept_accumulation(const CheckpointMeta& meta, int world, const TrainerOptions& o) {
  const int batch_size = o.data.batch_size;
  const int64_t global = global_batch_of(meta, batch_size, o.loop.grad_accum_steps);
  const int64_t per_step = static_cast<int64_t>(batch_size) * world;
  if (global % per_step != 0)
    throw OptionError(
        {{&o.loop.keep_global_batch, "loop.keep_global_batch"}, {&o.data.batch_size, "data.batch_size"}},
        str("{0}: the checkpoint's global batch ", global, " is not a multiple of {1} ", batch_size,
            " x world ", world, " = ", per_step, "; resume at a world size that divides ",
            global / batch_size, " (or with a {1} that fits), or without {0} (the global batch then becomes ",
            o.global_batch(world), ")"))
        .within(&o);
  return static_cast<int>(global / per_step);
}

double lr_step_offset(const CheckpointMeta& meta, int world, int batch_size, int grad_accum_steps) {
  const double before = meta.extra.value("lr_step_offset", 0.0);
  const auto old_batch = static_cast<double>(global_batch_of(meta, batch_size, grad_accum_steps));
  const auto new_batch = static_cast<double>(global_batch(batch_size, grad_accum_steps, world));
  const double steps = static_cast<double>(meta.global_step);
  return (steps + before) * old_batch / new_batch - steps;
}

namespace {

// Whether `checkpoint`, a checkpoint of the folder `root`, does not exist (stat said so, no
// other error).
bool rotated_away(const std::string& checkpoint, const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path path = fs::absolute(checkpoint, ec);  // "step_00000400" in the working folder too
  if (ec) return false;
  if (!path.has_filename()) path = path.parent_path();  // "ck/step_00000400/"
  if (fs::exists(path, ec) || ec) return false;
  const fs::path parent = fs::weakly_canonical(path.parent_path(), ec);
  if (ec) return false;
  const fs::path folder = fs::weakly_canonical(fs::path(root), ec);
  return !ec && parent == folder;
}

}  // namespace

std::optional<CheckpointEntry> choose_resume_checkpoint(const TrainerOptions& o, int world, const Logger& log,
                                                        const std::string& name_prefix) {
  const CheckpointOptions& co = o.checkpoint;
  const std::string& from = co.resume_from;
  // Refuses before anything runs, with the accumulation the run will have: under
  // keep_global_batch the one that keeps the checkpoint's global batch (a leftover
  // --grad_accum_steps 2 refused a resume that accumulation 1 continues exactly).
  const auto check_resume_point = [&](const CheckpointMeta& meta) {
    if (!o.loop.keep_global_batch) return resume_point(meta, world, o);
    TrainerOptions kept = o;
    kept.loop.grad_accum_steps = kept_accumulation(meta, world, o);
    return resume_point(meta, world, kept);
  };
  auto differences = [&](const CheckpointEntry& c) {
    return identity_differences(o.run_identity, c.meta.run, name_prefix);
  };
  const std::string& root = co.dir;
  const Listing listed = listing_of(root, log);  // no checksums read
  const std::vector<CheckpointEntry>& all = listed.complete;
  const auto checked_checkpoint = [&](const std::string& dir) {
    // Verified before anything is written (the load checks each file again as it reads it). A
    // damaged one is the user's to replace (exit 2): a restart of the job (launch --max_restarts)
    // would otherwise resume the folder's newest checkpoint instead of the one named.
    CheckpointEntry c{dir, {}};
    try {
      c.meta = verify_checkpoint(dir);
    } catch (const Error& e) {
      throw UsageError(str(e.what(),
                           ": it cannot be resumed; name another checkpoint, or resume_from auto for ",
                           "the newest of this run's that verifies"));
    }
    refuse_another_runs_checkpoint(o, c, name_prefix);
    refuse_another_runs_folder(o, listed, name_prefix, "a resume of {0}");
    check_resume_point(c.meta);
    return c;
  };
  if (!from.empty() && from != "auto") return checked_checkpoint(from);
  if (from.empty()) {  // this run's own there: the Trainer says its saves replace them
    check_fresh_start(o, listed, name_prefix);
    return std::nullopt;
  }
  // A restart of a run that named a checkpoint (resume_fallback) checks it as the first attempt
  // did, and stops as it did where it fails (damaged, refused): the first attempt then set
  // nothing aside, so the folder's newest may be the branch it was to abandon (under torchrun,
  // which restarts whatever the exit code, the restart resumed that branch).
  // One of this folder's that no longer exists (and no error said why not) was rotated away
  // after this run saved later checkpoints here (--keep_checkpoints): this run's newest is then
  // resumed, and without one the restart stops. Elsewhere, or unreadable, it is checked as it
  // was named: a folder not mounted on the restart's nodes is an error, not an older resume.
  std::optional<CheckpointEntry> fallback;
  const bool fallback_gone = !co.resume_fallback.empty() && rotated_away(co.resume_fallback, root);
  if (!co.resume_fallback.empty() && !fallback_gone) fallback = checked_checkpoint(co.resume_fallback);
  refuse_another_runs_among(o, listed.incomplete, name_prefix, "{0:auto}", "an incomplete one");
  std::vector<const CheckpointEntry*> ours_newest_first;
  const CheckpointEntry* theirs = nullptr;  // another run's newest
  const std::set<std::string> abandoned = abandoned_checkpoints(root);
  for (auto c = all.rbegin(); c != all.rend(); ++c) {
    if (!differences(*c).empty()) {
      if (!theirs) theirs = &*c;
    } else if (!is_abandoned(abandoned, c->dir)) {
      ours_newest_first.push_back(&*c);
    } else {  // Note [A branch a run abandons]
      log.warn(str("resume_from auto: skipping ", c->dir, " (step ", c->meta.global_step,
                   "): a start of this run abandoned it (", abandoned_mark_file(root),
                   "); name it to resume it, or delete that file"));
    }
  }
  // auto: the newest of this run's that verifies; older ones are not read (Note [Checkpoints read once]).
  if (theirs && !ours_newest_first.empty())
    another_run(o, "{0:auto}: {1} holds another run's checkpoints beside this run's; the newest", *theirs,
                differences(*theirs), kAnotherRunsFolderFix);
  if (const CheckpointEntry* c = newest_that_verifies(ours_newest_first, log)) {
    // A restart whose first attempt resumed a later checkpoint from elsewhere (resume_fallback)
    // and saved none here yet continues that one, not an older one of this run's here.
    if (fallback && fallback->meta.global_step > c->meta.global_step) {
      log.info(str("resume_from auto: ", fallback->dir, " (resume_fallback, step ",
                   fallback->meta.global_step, ") is later than this run's newest in ", root, " (",
                   c->meta.global_step, "): resuming from it"));
      return fallback;
    }
    log.info(str("resume_from auto: resuming from ", c->dir, " (this run's newest valid checkpoint",
                 fallback_gone ? "; resume_fallback " + co.resume_fallback + " is gone, rotated away" : "",
                 ")"));
    check_resume_point(c->meta);
    return *c;
  }
  if (fallback_gone)
    throw UsageError(str("resume_fallback ", co.resume_fallback, " (the checkpoint the run's first attempt ",
                         "resumed) does not exist, and ", root, " holds no valid checkpoint of this run: ",
                         "name a checkpoint to resume with resume_from"));
  if (theirs)
    another_run(o, "{0:auto}: {1} holds only another run's checkpoints; its newest", *theirs,
                differences(*theirs), kAnotherRunsFolderFix);
  if (fallback) {
    log.info(str("resume_from auto: no valid checkpoint in ", root, "; resuming from ", fallback->dir,
                 " (resume_fallback)"));
    return fallback;
  }
  log.info(str("resume_from auto: no valid checkpoint in ", root, ", starting fresh"));
  return std::nullopt;
}

// Note [One checkpoint for every rank]
// Each rank chooses the checkpoint auto resumes from its own listing of the folder (the files
// it then reads are its own to check). Ranks whose folders differ (node-local folders, or a
// network filesystem whose listing on one node lags the rename rank 0 just made) chose
// differently: they would resume different states and steps, and their collectives part (a
// hang, or a confusing error, minutes later). A checkpoint named by every rank may differ too:
// node-local folders where one node keeps an older job's checkpoint of the same name (names
// are steps and epochs), and each rank, its files verified, would load its own (DDP broadcasts
// the weights once, before the load: the replicas would stay apart for the whole run). So the
// ranks compare their choices by their manifests' bytes (every file's size and CRC-32; none
// for a fresh start), in one all_gather before anything is loaded, and every rank stops with
// the same error naming the ranks that differ (and whether their choice's name differs too).
void check_ranks_chose_the_same(const DistContext& ctx, const std::string& chosen, const std::string& root,
                                const std::string& flag) {
  if (ctx.world_size() == 1) return;
  std::string manifest;
  if (!chosen.empty()) {
    std::ifstream in(chosen + "/manifest.json", std::ios::binary);
    manifest.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  check_ranks_chose_the_same(ctx, chosen, manifest, root, flag);
}

void check_ranks_chose_the_same(const DistContext& ctx, const std::string& chosen,
                                const std::string& manifest, const std::string& root,
                                const std::string& flag) {
  if (ctx.world_size() == 1) return;
  const auto all =
      gathered_values(ctx, {static_cast<int64_t>(fnv1a(chosen)), static_cast<int64_t>(fnv1a(manifest))},
                      "the checkpoint each rank chose (Note [One checkpoint for every rank])");
  // The contents decide (copies alike under other paths load the same state); the names say
  // which mistake it was.
  std::string other_name, other_contents;
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r][1] == all[0][1]) continue;
    if (all[r][0] != all[0][0])
      other_name += str(other_name.empty() ? "" : ", ", r);
    else
      other_contents += str(other_contents.empty() ? "" : ", ", r);
  }
  if (other_name.empty() && other_contents.empty()) return;
  const std::string which = chosen.empty() ? std::string("none (a fresh start)") : "'" + chosen + "'";
  if (!other_name.empty())
    throw UsageError(str("the ranks chose different checkpoints from '", root, "': rank(s) ", other_name,
                         " chose another than rank 0; this rank (", ctx.rank(), ") chose ", which,
                         ". Every rank reads the folder itself: make it one folder every node sees alike "
                         "(a shared filesystem), or pass ",
                         flag, " naming one checkpoint every node has"));
  throw UsageError(str("the ranks' copies of ", which, " differ: rank(s) ", other_contents,
                       " hold other files under that name than rank 0 (their manifests differ: another ",
                       "save of that step, e.g. an older job's in a node-local folder). Every rank would ",
                       "load its own: give every node the same copy (a shared filesystem), or pass ", flag,
                       " naming one checkpoint every node holds alike"));
}

void continue_newest_on_restart(CheckpointOptions& co, int restart_count, const std::string& same_job,
                                const Logger& log) {
  if ((restart_count <= 0 && same_job.empty()) || co.dir.empty() || co.resume_from == "auto") return;
  const std::string given = co.resume_from.empty() ? std::string("a fresh start") : co.resume_from;
  const std::string why =
      restart_count > 0
          ? str("restart ", restart_count)
          : str("torchrun job '", same_job,
                "' started again in this folder (a change of its nodes, which torchrun does not count "
                "as a restart; a new job takes another --rdzv_id)");
  log.warn(str(why, ": resuming this run's newest checkpoint in ", co.dir, " (resume_from auto, else ", given,
               ") instead of ", given));
  co.resume_fallback = co.resume_from;
  co.resume_from = "auto";
}

void refuse_another_runs(const TrainerOptions& o, const std::optional<CheckpointEntry>& resume,
                         const Logger& log) {
  const Listing listed = listing_of(o.checkpoint.dir, log);
  if (!resume) {
    check_fresh_start(o, listed, "");
    return;
  }
  refuse_another_runs_checkpoint(o, *resume, "");
  refuse_another_runs_folder(o, listed, "", "a resume of {0}");
}

}  // namespace ddptrain
