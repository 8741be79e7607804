// Note [Agreed stop]
// A stop request (SIGTERM/SIGINT through the program's handler, TrainerOptions::stop_requested)
// reaches ranks at different moments, yet every rank must stop after the same optimizer step,
// or the ones still training wait forever in a collective. So the ranks vote: each step starts
// an asynchronous sum of the local requests and the next step reads it; every rank then sees
// the same sum and stops after the same step, and the exchange costs no waiting. A world of
// one reads its own request. The pending vote is drained at each epoch's end, so that it never
// stays outstanding across other collectives; a request it found stops the run there, before
// the epoch's evaluation (it was dropped, and the run stopped a step into the next epoch).
// Reading the sum is no host sync on a GPU (Note [No host sync in a step], optim/grad_clip.h):
// on CUDA the sum is copied into pinned host memory on the stream right after its all-reduce
// and an event recorded; the next step waits for that event only (the previous step's work),
// not for the kernels the host has queued since, and reads the host copy. On CPU (Gloo) the
// tensor is in host memory already.
#pragma once

#include <optional>

#include <c10/core/Event.h>

#include <functional>
#include <vector>

#include "dist/dist_context.h"

namespace ddptrain {

class StopVote {
 public:
  StopVote(const DistContext& ctx, std::function<int()> stop_requested);
  /// Called once per optimizer step on every rank: true when the vote started at the previous
  /// step found a request on any rank.
  bool agreed();
  /// Waits for the pending vote, if any (at an epoch's end): true when it found a request on
  /// any rank (the vote started at the epoch's last step: its stop is the epoch's end).
  bool drain();
  /// The local request's signal, or 0.
  int local_signal() const { return requested_ ? requested_() : 0; }

 private:
  void start_vote();
  bool read_vote();

  const DistContext& ctx_;
  std::function<int()> requested_;
  std::vector<at::Tensor> votes_;
  compat::WorkHandle pending_;        // CPU: the all-reduce, read at the next step
  at::Tensor host_copy_;              // CUDA: the sum in pinned memory ...
  std::optional<c10::Event> copied_;  // ... and the event after its copy
  bool copy_pending_ = false;
};

}  // namespace ddptrain
