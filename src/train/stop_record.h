// A run's end on a stop signal, as its launcher sees it (Note [Agreed stop]): the exit code
// 128 + signal, and under torchrun or `ddptrain launch` a stop record in the rank's error file
// (TORCHELASTIC_ERROR_FILE, torchrun's format, with "stop_signal" in extraInfo). `ddptrain
// launch` takes a worker that exits 128 + signal with that record for the job's stop, not a
// failure (no restart), where it did not forward the signal itself: one sent to a worker alone,
// or received by another node's launcher. torchrun, which counts any non-zero exit as a
// failure, quotes the record as its root cause.
#pragma once

#include "dist/dist_context.h"
#include "train/trainer.h"

namespace ddptrain {

/// The program's exit code after fit() returned `r`: 0, or 128 + the signal that stopped it,
/// said in the rank's error file where the environment names one. A library program under a
/// launcher returns it from main().
int stop_exit_code(const TrainResult& r, const DistContext& ctx);

}  // namespace ddptrain
