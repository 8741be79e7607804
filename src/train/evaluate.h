// Evaluation over a test split, distributed: each test sample is evaluated by exactly one
// rank (rank r takes r, r+W, ...) and the sums are reduced once, so loss and accuracy are
// over exactly the test set: no double counting, whatever the world size. Every rank runs the
// same forwards, as a forward of ZeRO stage 3 is a collective (each unit's parameters
// gathered from every rank): a rank whose share is one sample short evaluates one more (the
// split's first) that counts nowhere, and the ranks agree after each batch whether to stop.
#pragma once

#include <cstdint>
#include <functional>

#include "data/datasets.h"
#include "dist/dist_context.h"
#include "models/model.h"
#include "train/stop_request.h"
#include "train/trainable.h"

namespace ddptrain {

struct EvalResult {
  double loss = 0;
  double accuracy = -1;      // -1 when the objective has no `correct`
  int64_t samples = 0;       // over all ranks: the size of the test split, unless interrupted
  bool interrupted = false;  // a rank was asked to stop (stop_requested) and stopped early
  StopRequest stop;          // when interrupted: the signal and the lowest rank asked
  double seconds = 0;        // the evaluation's wall time on this rank, the final all-reduce included
};

struct EvalOptions {
  int batch_size = 64;
  int num_workers = 2;
  std::function<int()> stop_requested;  // nonzero: stop at the next batch (every rank still reduces once)
};

/// The objective's mean loss and accuracy over every prediction of the test split (per
/// predicted token for token data: perplexity = exp(loss)); each module is put back in the mode
/// it had (Note [Each module keeps its mode]). Logs its start, progress every 10 s and its duration. A
/// collective.
EvalResult evaluate(const Trainable& model, const Objective& objective, const Dataset& test,
                    const EvalOptions& opts, const DistContext& ctx);

/// A built-in model (or a scripted one), with the classification objective unless given.
EvalResult evaluate(const std::shared_ptr<Model>& model, const Dataset& test, const EvalOptions& opts,
                    const DistContext& ctx, const Objective& objective = Objective::classification());

}  // namespace ddptrain
