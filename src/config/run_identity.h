// The identity of a training run: the flags that define what it trains, recorded in every
// checkpoint so that a resume continues the same run and nothing else.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ddptrain {

struct TrainConfig;

/// Note [Run identity]
/// A checkpoint records the flags that define its run: every train flag except the ones a
/// resume may change (flags_that_may_change_on_resume(): where the data and checkpoints are,
/// how long to train, logging, threads, performance knobs), as the text the flag table prints.
/// --resume_from auto continues only this run's newest valid checkpoint; an explicit
/// --resume_from of another run, auto finding only other runs' checkpoints, and a new run into
/// a --checkpoint_dir holding another run's checkpoints are usage errors naming the flags that
/// differ (src/train/resume.h). A checkpoint written before identities were recorded matches
/// any run (nothing to compare).
/// A scripted module (--model torchscript) is identified by its file's content, not its path
/// (kModuleContent): the same module moved or reached by another path continues the run.
using RunIdentity = std::map<std::string, std::string>;  // flag name -> value as text

/// The identity's entry for the content of --model_path's file (a hash of its bytes).
inline constexpr const char* kModuleContent = "the content of --model_path's file";

RunIdentity run_identity(const TrainConfig& cfg);

/// "--lr 0.05 (the checkpoint's: 0.01)" for each flag whose values differ; empty when the
/// runs match. A flag `theirs` does not record (an older checkpoint) is not compared.
std::vector<std::string> identity_differences(const RunIdentity& mine, const RunIdentity& theirs);

/// The train flags a resume may change, sorted (docs/checkpoints.md).
const std::vector<std::string>& flags_that_may_change_on_resume();

}  // namespace ddptrain
