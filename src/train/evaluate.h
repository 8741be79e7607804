// Evaluation over a test split, distributed: each test sample is evaluated by exactly one
// rank (rank r takes r, r+W, ...) and the sums are reduced once, so loss and accuracy are
// over exactly the test set: no padding, no double counting, whatever the world size.
#pragma once

#include <cstdint>

#include "data/datasets.h"
#include "dist/dist_context.h"
#include "models/model.h"

namespace ddptrain {

struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t samples = 0;       // over all ranks: the size of the test split, unless interrupted
  bool interrupted = false;  // a rank got SIGINT/SIGTERM (stop_signal) and stopped early
};

/// Top-1 accuracy and mean cross-entropy of the model (put back in train mode afterwards);
/// for token data both are per predicted token (perplexity = exp(loss)). Logs its start,
/// progress every 10 s and its duration; a SIGINT/SIGTERM stops it at the next batch (the
/// result then says interrupted, and covers what was evaluated).
EvalResult evaluate(Model& model, const Dataset& test, int batch_size, int num_workers, const DistContext& ctx);

}  // namespace ddptrain
