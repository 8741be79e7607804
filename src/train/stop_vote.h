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
// The vote names who was asked: each rank puts its signal in its own slot of a tensor of the
// world's size, so every rank learns the signal and the lowest rank that received it. A rank
// stopped by another's request says so (the log, TrainResult, the launcher's report): under
// `ddptrain launch` on another node it would otherwise look like a worker killed by SIGTERM.
// A request made during start-up (indexing the data, loading the checkpoint) is voted on once,
// blocking, before the first step: the run stops there, with nothing trained and nothing saved
// (it was acted on only at step 2, after which --checkpoint_on_signal saved).
#pragma once

#include <optional>

#include <c10/core/Event.h>

#include <functional>
#include <vector>

#include "dist/dist_context.h"
#include "train/stop_request.h"

namespace ddptrain {

class StopVote {
 public:
  StopVote(const DistContext& ctx, std::function<int()> stop_requested);
  /// A blocking vote, on every rank: before the first step (a request made during start-up),
  /// after each evaluation batch.
  StopRequest agreed_now();
  /// Called once per optimizer step on every rank: the request the vote started at the previous
  /// step found on any rank, if any.
  StopRequest agreed();
  /// Waits for the pending vote, if any (at an epoch's end): the request it found on any rank
  /// (the vote started at the epoch's last step: its stop is the epoch's end).
  StopRequest drain();
  /// The local request's signal, or 0.
  int local_signal() const { return requested_ ? requested_() : 0; }

 private:
  void start_vote();
  StopRequest read_vote();
  StopRequest local_request() const;

  const DistContext& ctx_;
  std::function<int()> requested_;
  std::vector<at::Tensor> votes_;
  compat::WorkHandle pending_;        // CPU: the all-reduce, read at the next step
  at::Tensor host_copy_;              // CUDA: the sum in pinned memory ...
  std::optional<c10::Event> copied_;  // ... and the event after its copy
  bool copy_pending_ = false;
};

}  // namespace ddptrain
