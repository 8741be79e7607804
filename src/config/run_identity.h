// The identity of a `ddptrain train` run (Note [Run identity], train/run_identity.h): every
// train flag except the ones a resume may change (flags_that_may_change_on_resume(): where the
// data and checkpoints are, how long to train, logging, threads, performance knobs), as the
// text the flag table prints, named by the flag without its dashes. A scripted module (--model
// torchscript) is identified by its file's content, not its path (kModuleContent): the same
// module moved or reached by another path continues the run.
#pragma once

#include <string>
#include <vector>

#include "train/run_identity.h"

namespace ddptrain {

struct TrainConfig;

/// The identity's entry for the content of --model_path's file (a hash of its bytes).
inline constexpr const char* kModuleContent = "the content of --model_path's file";

RunIdentity run_identity(const TrainConfig& cfg);

class Dataset;
/// The identity's entry for what the labels name (Dataset::label_names_hash: an image folder's
/// class names, in label order; "N classes, names <hash>"): --data_dir may change on resume,
/// and a copy whose class folders are named otherwise (one renamed, one added and another
/// removed) would label the same images with other classes. The key's words name the first
/// dataset that had names; checkpoints hold it as it is.
inline constexpr const char* kImageClasses = "the image folder's classes";
/// Adds kImageClasses where the training split's labels have names (nothing for other datasets).
void add_data_identity(RunIdentity& id, const Dataset& train);

/// The train flags a resume may change, sorted (docs/checkpoints.md).
const std::vector<std::string>& flags_that_may_change_on_resume();

}  // namespace ddptrain
