// meta.json, a checkpoint's position and small state (checkpoint/checkpoint.h's CheckpointMeta):
// written by save_checkpoint, read by every reader of a checkpoint. Private to checkpoint/.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/checkpoint.h"

namespace ddptrain {

/// The checkpoint format this ddptrain writes and reads (manifest.json's and meta.json's "format").
inline constexpr int kCheckpointFormat = 2;

/// meta.json's text for `meta`, with the size of the gathered RNG states.
std::string meta_json(const CheckpointMeta& meta, int64_t rng_state_bytes);

/// meta.json's `text` of the checkpoint at `dir` (whose config.json gives an older checkpoint's
/// batch size).
CheckpointMeta meta_from_json(const std::string& text, const std::string& dir);

}  // namespace ddptrain
