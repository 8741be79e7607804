// meta.json's "training_split" (data/datasets.h TrainingSplit): what the split a checkpoint
// trained on was (the shape its model was built from, an image folder's class names), so that
// `ddptrain eval` opens the test split alone: a machine with only the validation files evaluates
// it, and the training files, which may be far larger, are never read. Checkpoints written
// before it was recorded have none: eval then opens both splits, as it did.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "data/datasets.h"

namespace ddptrain {

/// The record a checkpoint keeps of `train`, its run's training split.
nlohmann::json training_split_record(const Dataset& train);

/// The checkpoint's record; nothing where it has none. An Error naming the key where it is malformed.
std::optional<TrainingSplit> recorded_training_split(const CheckpointMeta& meta);

}  // namespace ddptrain
