// Which checkpoint a training run continues from, if any (Note [Run identity]).
#pragma once

#include <optional>
#include <string>

#include "checkpoint/checkpoint.h"
#include "data/epoch_plan.h"
#include "dist/dist_context.h"
#include "obs/logger.h"
#include "train/trainer_options.h"

namespace ddptrain {

/// The micro-batch of its epoch at which a run resumed from `meta` continues: the checkpoint's
/// position in samples (per rank) in batches of this run's o.data.batch_size, which may differ
/// from the checkpoint's, so that every sample of the epoch is trained exactly once.
/// OptionError naming data.batch_size (of `o`) when that position is not a whole number of
/// accumulation groups of the new batch size.
int64_t resume_micro_batch(const CheckpointMeta& meta, const TrainerOptions& o);

/// The order and progress meta.json recorded for the checkpoint's epoch (Note [Resume at
/// another world size]); older checkpoints: their world and batch, end -1 (unknown here).
EpochPlan epoch_plan_of(const CheckpointMeta& meta, int batch_size);

/// Where a run of `world` ranks resumed from `meta` continues its epoch: at a micro-batch of the
/// sampler's indices (the checkpoint's own world size: resume_micro_batch, and its OptionError),
/// or with the rest of an epoch planned at another world size (end -1: to be computed from the
/// dataset's length). Nothing for a checkpoint at an epoch's end.
struct ResumePoint {
  int64_t micro = 0;
  std::optional<EpochPlan> rest;
};
ResumePoint resume_point(const CheckpointMeta& meta, int world, const TrainerOptions& o);

/// The checkpoint's epoch order was drawn over a training set of the size its plan records
/// (Note [Resume at another world size]), read from the files it records (`files`: this set's
/// Dataset::files_hash). Mid-epoch, a set of another size, or of other files, would continue
/// another order (samples repeated or skipped): UsageError naming both sizes and `from`. At an
/// epoch's end the next epoch draws its order over this set: said in rank 0's log. Checkpoints
/// from before the size or the files were recorded, and datasets that do not know their files
/// (0), are not checked.
void check_training_set_size(const CheckpointMeta& meta, int64_t samples, uint64_t files,
                             const std::string& from, const DistContext& ctx);

/// The schedule's steps the checkpoint's run took, counted in this run's global batch, minus its
/// optimizer steps: 0 when the global batch is unchanged (the schedule continues by samples).
double lr_step_offset(const CheckpointMeta& meta, int world, int batch_size, int grad_accum_steps);

/// The global batch of the checkpoint's run (older checkpoints: with o's accumulation).
int64_t checkpoint_global_batch(const CheckpointMeta& meta, const TrainerOptions& o);

/// loop.keep_global_batch: the accumulation steps that keep the checkpoint's global batch at
/// `world` ranks of o.data.batch_size; an OptionError naming the numbers when that is not whole.
int kept_accumulation(const CheckpointMeta& meta, int world, const TrainerOptions& o);

/// The checkpoint this run resumes from (its meta.json as verified or listed), or nothing for a
/// fresh start, from
/// o.checkpoint.resume_from (a directory, "auto", or "") and the checkpoints in
/// o.checkpoint.dir, by o.run_identity (Note [Run identity]). OptionError naming what differs
/// (identity names after `name_prefix`: "--" for flags) when the chosen checkpoint, or the
/// only ones auto finds, belong to another run, or when a fresh run would write among another
/// run's checkpoints; and the error of resume_point when the run cannot continue there. Reads
/// files only: every rank reaches the same answer.
std::optional<CheckpointEntry> choose_resume_checkpoint(const TrainerOptions& o, int world, const Logger& log,
                                                        const std::string& name_prefix = "");

/// Note [One checkpoint for every rank]: a UsageError on every rank when the ranks' choices
/// (`chosen`: this rank's, "" for a fresh start) differ, by name or by their manifests' bytes.
/// `flag`: the flag that names a checkpoint instead (--resume_from; eval's --checkpoint). A
/// collective.
void check_ranks_chose_the_same(const DistContext& ctx, const std::string& chosen, const std::string& root,
                                const std::string& flag = "--resume_from");
/// The same with the manifest's bytes given (what the one above reads from `chosen`).
void check_ranks_chose_the_same(const DistContext& ctx, const std::string& chosen,
                                const std::string& manifest, const std::string& root,
                                const std::string& flag);

/// A restart's rule (CheckpointOptions::resume_on_restart): with restart_count > 0, or `same_job`
/// (the torchrun job that started last in the folder: Note [A torchrun job's restarts]), a `dir`
/// and resume_from other than "auto", resume_from becomes "auto" with the old one as its
/// fallback, said in the log.
void continue_newest_on_restart(CheckpointOptions& co, int restart_count, const std::string& same_job,
                                const Logger& log);

/// A Trainer given a claim (train/folder_claim.h) checks its choice by its own identity, which
/// holds more than the CLI's flags (the optimizer, the parameters' shapes, what the labels
/// name): the OptionError of choose_resume_checkpoint where `resume` (nothing: a fresh start)
/// or a checkpoint in o.checkpoint.dir belongs to another run. Reads files only.
void refuse_another_runs(const TrainerOptions& o, const std::optional<CheckpointEntry>& resume,
                         const Logger& log);

}  // namespace ddptrain
