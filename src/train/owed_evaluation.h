// Note [Evaluation owed]
// An epoch's checkpoint is saved before its evaluation, so an evaluation that fails loses no
// training (CheckpointPolicy::before_evaluation). But the epoch's record is written after the
// evaluation, and a resume starts at the next epoch: a crash, a kill or a stop during the
// evaluation lost the epoch's record and its evaluation, and one in the last epoch's left a
// resumed run with "nothing to train" and no final evaluation at all, exit 0. So a checkpoint
// saved before a due evaluation keeps the epoch's training summary (meta.json's
// "evaluation_owed"), and once the evaluation completes rank 0 writes evaluation.json beside
// it (not in the manifest: the checkpoint itself is unchanged). A run resumed from a
// checkpoint that owes its evaluation makes it before it trains (or when it has nothing left to
// train) and writes the epoch's record then, its training half from the checkpoint and marked
// "evaluation_resumed"; then it writes evaluation.json. Rank 0 reads whether it is there and
// tells every rank (an evaluation is a collective: every rank decides the same). A checkpoint
// copied without its evaluation.json is evaluated again on resume, and the log says so.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "dist/dist_context.h"
#include "train/callbacks.h"

namespace ddptrain {

/// meta.json's key for the summary of an epoch whose evaluation the checkpoint owes.
inline constexpr const char* kEvaluationOwedKey = "evaluation_owed";

/// The epoch's training summary, as meta.json's kEvaluationOwedKey keeps it.
nlohmann::json owed_evaluation_json(int epoch, const EpochEvent& e);

/// What a checkpoint owes: the epoch and its training summary.
struct OwedEvaluation {
  int epoch = 0;
  EpochPosition position;  // the event refers to it
  nlohmann::json summary;
  /// The epoch's event as its run had it before the evaluation, marked evaluation_resumed.
  EpochEvent event() const;
};

/// The evaluation the checkpoint at `dir` owes, if any (its meta.json says one was due and no
/// evaluation.json says it was made). A collective where the meta says one was due.
std::optional<OwedEvaluation> owed_evaluation(const DistContext& ctx, const CheckpointMeta& meta,
                                              const std::string& dir);

/// Rank 0: writes evaluation.json into the checkpoint at `dir`, which owed `epoch`'s
/// evaluation; a failure to write it is a warning (a later resume from it evaluates again).
void record_evaluation_made(const DistContext& ctx, const std::string& dir, int epoch, const EvalResult& ev);

}  // namespace ddptrain
