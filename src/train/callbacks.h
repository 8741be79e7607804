// Callbacks: the periodic work around the training loop (step lines and metrics, checkpoint
// policy, the sample trace, the profiler, and a user's own). Every rank calls every callback
// at the same points in the same order, so a callback may run collectives, if it runs the
// same ones on every rank. Default hooks do nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ATen.h>

#include "train/evaluate.h"
#include "train/train_state.h"
#include "util/clock.h"

namespace ddptrain {

/// After each micro-batch's backward.
struct MicroBatchEvent {
  int64_t micro = 0;                    // its index in the epoch
  const std::vector<int64_t>& indices;  // the dataset index of each sample
  const at::Tensor& loss;               // its mean loss, detached, float64, on the device
};

/// A timed phase of a step ("data", "fwd", "bwd", "opt"; train/step_timer.h).
struct PhaseEvent {
  const char* name;
  Clock::time_point start, end;
  int64_t run_step = 0;  // the step of this run it belongs to (0-based)
};

/// Where an epoch stands.
struct EpochPosition {
  int64_t first_micro = 0;  // the first micro-batch this run trains of it (a resume)
  int64_t batches = 0;      // micro-batches per rank in the epoch
  int64_t steps_per_epoch = 0;
  Clock::time_point started;
};

/// After each optimizer step (and the agreed stop vote).
struct StepEvent {
  const EpochPosition& epoch;
  int64_t step_in_epoch = 0;
  bool stepped = true;     // false: skipped on inf/NaN gradients
  bool stopping = false;   // --max_steps reached or a stop was agreed: the loop ends after this step
  const at::Tensor& loss;  // the last micro-batch's (detached, on the device)
};

/// After an epoch's summary (an all-reduce) and its evaluation. Its training half is what a
/// checkpoint that owes the evaluation keeps (Note [Evaluation owed]).
struct EpochEvent {
  explicit EpochEvent(const EpochPosition& p) : position(p) {}
  const EpochPosition& position;
  bool partial = false;    // this run trained only some of its micro-batches
  int64_t micro_done = 0;  // the micro-batches of the epoch trained when it ended
  double seconds = 0;
  double train_loss = 0, train_acc = -1;  // over all ranks; acc -1 without Objective::correct
  std::optional<EvalResult> eval;         // when it evaluated (and was not interrupted)
  bool eval_interrupted = false;
  std::vector<double> peak_mem_mib;  // per rank; empty where the device has no counter
  std::vector<double> peak_rss_mib;  // per rank
  int64_t skipped_samples = 0;       // unreadable samples replaced, first found this epoch by any rank (Note
                                     // [Unreadable samples counted once])
  int64_t skipped_steps = 0;         // optimizer steps of this epoch skipped on inf/NaN gradients
  // The epoch's order was cut at another world size (Note [Resume at another world size]): the
  // positions done before this run's part and the epoch's; 0 otherwise.
  int64_t positions_done_before = 0, positions_in_epoch = 0;
  bool stopping = false;
  bool evaluation_resumed =
      false;  // trained by the run of the checkpoint resumed from, evaluated by this one
};

class Callback {
 public:
  virtual ~Callback() = default;
  /// Before an epoch's first micro-batch (also of an epoch a resume enters midway).
  virtual void on_epoch_begin(const TrainState&, const EpochPosition&) {}
  virtual void on_micro_batch(const TrainState&, const MicroBatchEvent&) {}
  virtual void on_phase(const TrainState&, const PhaseEvent&) {}
  virtual void on_step_end(const TrainState&, const StepEvent&) {}
  /// After the epoch's last step, before its summary and evaluation.
  virtual void on_epoch_trained(const TrainState&) {}
  /// After its evaluation; also, before the first epoch of a resumed run, for the epoch whose
  /// evaluation the checkpoint owed (EpochEvent::evaluation_resumed: Note [Evaluation owed]).
  virtual void on_epoch_end(const TrainState&, const EpochEvent&) {}
};

}  // namespace ddptrain
